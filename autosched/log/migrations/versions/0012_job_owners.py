"""Who each tuning job and model job belongs to: the principal of the client token that submitted
it (``autosched.log.tokens``). Jobs stored before have no owner: only an admin token sees them.
Indexes for owners' turns in the queue: running jobs by target, and each job's waiting candidates
in queue order.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tuning_jobs") as batch:
        batch.add_column(sa.Column("owner", sa.String(64), nullable=True))
        batch.create_index(op.f("ix_tuning_jobs_owner_status"), ["owner", "status"])
        batch.create_index(op.f("ix_tuning_jobs_status_target_id"), ["status", "target_id"])
    op.create_index(
        op.f("ix_candidates_job_id_state_queue_position"),
        "candidates",
        ["job_id", "state", "queue_position"],
    )
    with op.batch_alter_table("model_jobs") as batch:
        batch.add_column(sa.Column("owner", sa.String(64), nullable=True))
        batch.create_index(op.f("ix_model_jobs_owner_status"), ["owner", "status"])


def downgrade() -> None:
    with op.batch_alter_table("model_jobs") as batch:
        batch.drop_index(op.f("ix_model_jobs_owner_status"))
        batch.drop_column("owner")
    op.drop_index(op.f("ix_candidates_job_id_state_queue_position"), "candidates")
    with op.batch_alter_table("tuning_jobs") as batch:
        batch.drop_index(op.f("ix_tuning_jobs_status_target_id"))
        batch.drop_index(op.f("ix_tuning_jobs_owner_status"))
        batch.drop_column("owner")
