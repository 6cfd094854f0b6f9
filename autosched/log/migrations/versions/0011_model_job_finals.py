"""How a model job's tasks end: the fastest candidates each task's final times again, and in
how many rounds (model jobs stored before carry the defaults, 8 and 10).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("model_jobs") as batch:
        batch.add_column(sa.Column("finalists", sa.Integer(), nullable=False, server_default="8"))
        batch.add_column(
            sa.Column("final_rounds", sa.Integer(), nullable=False, server_default="10")
        )
        batch.create_check_constraint(op.f("ck_model_jobs_finalists"), "finalists >= 0")
        batch.create_check_constraint(op.f("ck_model_jobs_final_rounds"), "final_rounds >= 1")


def downgrade() -> None:
    with op.batch_alter_table("model_jobs") as batch:
        batch.drop_constraint(op.f("ck_model_jobs_final_rounds"), type_="check")
        batch.drop_constraint(op.f("ck_model_jobs_finalists"), type_="check")
        batch.drop_column("final_rounds")
        batch.drop_column("finalists")
