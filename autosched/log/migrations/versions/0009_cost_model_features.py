"""The feature definition a shared cost model reads: a model trained on one definition never
scores candidates described by another. Models stored before are of pooled per-store features.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_POOLED = "per-store-pooled-329"


def upgrade() -> None:
    with op.batch_alter_table("cost_models") as batch:
        batch.add_column(
            sa.Column("features", sa.String(64), nullable=False, server_default=_POOLED)
        )
    with op.batch_alter_table("cost_models") as batch:
        batch.alter_column("features", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("cost_models") as batch:
        batch.drop_column("features")
