"""The finals of service jobs: their fastest candidates timed again by one worker at their end.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "finals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column(
            "job_id",
            sa.Integer(),
            sa.ForeignKey("tuning_jobs.id", name=op.f("fk_finals_job_id_tuning_jobs")),
            nullable=False,
        ),
        sa.Column("finalists", sa.Integer(), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("entrants", sa.JSON(), nullable=True),
        sa.Column(
            "lease_id",
            sa.Integer(),
            sa.ForeignKey("leases.id", name=op.f("fk_finals_lease_id_leases")),
            nullable=True,
        ),
        sa.Column("strikes", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_finals")),
        sa.UniqueConstraint("job_id", name=op.f("uq_finals_job_id")),
        sa.CheckConstraint(
            "state IN ('pending', 'queued', 'leased', 'timed', 'skipped', 'failed')",
            name=op.f("ck_finals_state"),
        ),
        sa.CheckConstraint("finalists >= 1", name=op.f("ck_finals_finalists")),
        sa.CheckConstraint("rounds >= 1", name=op.f("ck_finals_rounds")),
    )
    op.create_index(op.f("ix_finals_state"), "finals", ["state"])
    op.create_index(op.f("ix_finals_lease_id"), "finals", ["lease_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_finals_lease_id"), table_name="finals")
    op.drop_index(op.f("ix_finals_state"), table_name="finals")
    op.drop_table("finals")
