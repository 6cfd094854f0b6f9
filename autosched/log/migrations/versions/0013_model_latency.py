"""A tuned model's latency timed whole (``autosched.model.latency``): the compiled model's median
and 95% interval as the loader runs it, beside the estimate summed over its tasks. Models tuned
before have none.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("measured_secs", "measured_low_secs", "measured_high_secs")


def upgrade() -> None:
    with op.batch_alter_table("tuned_models") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuned_models") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
