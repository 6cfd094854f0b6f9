"""Why a job ended before its budget was spent (its design space had nothing new left).

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


def upgrade() -> None:
    with op.batch_alter_table("tuning_jobs") as batch:
        batch.add_column(sa.Column("stop_reason", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuning_jobs") as batch:
        batch.drop_column("stop_reason")
