"""Finalists timed again at the end of a job: every sample, the median's confidence interval, the
rank and whether it ties with the winner.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "finalist_timings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column(
            "job_id",
            sa.Integer(),
            sa.ForeignKey("tuning_jobs.id", name=op.f("fk_finalist_timings_job_id_tuning_jobs")),
            nullable=False,
        ),
        sa.Column(
            "candidate_id",
            sa.Integer(),
            sa.ForeignKey(
                "candidates.id", name=op.f("fk_finalist_timings_candidate_id_candidates")
            ),
            nullable=False,
        ),
        sa.Column(
            "device_id",
            sa.Integer(),
            sa.ForeignKey("devices.id", name=op.f("fk_finalist_timings_device_id_devices")),
            nullable=True,
        ),
        sa.Column("samples", sa.JSON(), nullable=False),
        sa.Column("first_median_secs", sa.Double(), nullable=False),
        sa.Column("median_secs", sa.Double(), nullable=False),
        sa.Column("ci_low_secs", sa.Double(), nullable=False),
        sa.Column("ci_high_secs", sa.Double(), nullable=False),
        sa.Column("confidence", sa.Double(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("tie", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_finalist_timings")),
        sa.UniqueConstraint(
            "job_id", "candidate_id", name=op.f("uq_finalist_timings_job_id_candidate_id")
        ),
        sa.CheckConstraint("rank >= 1", name=op.f("ck_finalist_timings_rank")),
    )
    op.create_index(op.f("ix_finalist_timings_job_id"), "finalist_timings", ["job_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_finalist_timings_job_id"), table_name="finalist_timings")
    op.drop_table("finalist_timings")
