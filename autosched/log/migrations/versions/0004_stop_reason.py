"""Why a job ended before its budget was spent (its design space had nothing new left), and the
token each worker registered with, the only one that may act for it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_WORKER_TOKEN_FK = "fk_workers_token_id_api_tokens"


def upgrade() -> None:
    with op.batch_alter_table("tuning_jobs") as batch:
        batch.add_column(sa.Column("stop_reason", sa.String(255), nullable=True))
    with op.batch_alter_table("workers") as batch:
        batch.add_column(
            sa.Column(
                "token_id",
                sa.Integer(),
                sa.ForeignKey("api_tokens.id", name=op.f(_WORKER_TOKEN_FK)),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_constraint(op.f(_WORKER_TOKEN_FK), type_="foreignkey")
        batch.drop_column("token_id")
    with op.batch_alter_table("tuning_jobs") as batch:
        batch.drop_column("stop_reason")
