"""The tuning service: job states and engine claims, the candidate queue, workers, leases, tokens.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD_STATUSES = "status IN ('running', 'finished', 'interrupted', 'failed')"
_NEW_STATUSES = "status IN ('queued', 'running', 'finished', 'interrupted', 'failed', 'cancelled')"


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column(
            "target_id",
            sa.Integer(),
            sa.ForeignKey("targets.id", name=op.f("fk_workers_target_id_targets")),
            nullable=False,
        ),
        sa.Column(
            "device_id",
            sa.Integer(),
            sa.ForeignKey("devices.id", name=op.f("fk_workers_device_id_devices")),
            nullable=False,
        ),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
    )
    op.create_table(
        "leases",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "worker_id",
            sa.Integer(),
            sa.ForeignKey("workers.id", name=op.f("fk_leases_worker_id_workers")),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leases")),
        sa.CheckConstraint(
            "state IN ('active', 'reported', 'expired')", name=op.f("ck_leases_state")
        ),
    )
    op.create_index(op.f("ix_leases_worker_id"), "leases", ["worker_id"])
    op.create_index(op.f("ix_leases_state_expires_at"), "leases", ["state", "expires_at"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
        sa.CheckConstraint("role IN ('client', 'worker')", name=op.f("ck_api_tokens_role")),
    )
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("source", sa.Text(), nullable=True))
    with op.batch_alter_table("tuning_jobs") as batch:
        batch.add_column(sa.Column("engine_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("engine_expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.drop_constraint(op.f("ck_tuning_jobs_status"), type_="check")
        batch.create_check_constraint(op.f("ck_tuning_jobs_status"), _NEW_STATUSES)
    with op.batch_alter_table("candidates") as batch:
        batch.add_column(
            sa.Column("state", sa.String(16), nullable=False, server_default="measured")
        )
        batch.add_column(
            sa.Column(
                "lease_id",
                sa.Integer(),
                sa.ForeignKey("leases.id", name=op.f("fk_candidates_lease_id_leases")),
                nullable=True,
            )
        )
        batch.add_column(sa.Column("queue_position", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("strikes", sa.Integer(), nullable=False, server_default="0"))
        batch.create_check_constraint(
            op.f("ck_candidates_state"), "state IN ('queued', 'leased', 'measured', 'poisoned')"
        )
        batch.create_index(op.f("ix_candidates_lease_id"), ["lease_id"])
        batch.create_index(
            op.f("ix_candidates_state_target_id_queue_position"),
            ["state", "target_id", "queue_position"],
        )


def downgrade() -> None:
    with op.batch_alter_table("candidates") as batch:
        batch.drop_index(op.f("ix_candidates_state_target_id_queue_position"))
        batch.drop_index(op.f("ix_candidates_lease_id"))
        batch.drop_constraint(op.f("ck_candidates_state"), type_="check")
        batch.drop_constraint(op.f("fk_candidates_lease_id_leases"), type_="foreignkey")
        for column in ("strikes", "queue_position", "lease_id", "state"):
            batch.drop_column(column)
    with op.batch_alter_table("tuning_jobs") as batch:
        batch.drop_constraint(op.f("ck_tuning_jobs_status"), type_="check")
        batch.create_check_constraint(op.f("ck_tuning_jobs_status"), _OLD_STATUSES)
        batch.drop_column("engine_expires_at")
        batch.drop_column("engine_id")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("source")
    op.drop_table("api_tokens")
    op.drop_table("leases")
    op.drop_table("workers")
