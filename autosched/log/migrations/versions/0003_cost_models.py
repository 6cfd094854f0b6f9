"""Shared cost models: versioned models per target family, cached candidate features, and the
model version each job started from.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JOB_MODEL_FK = "fk_tuning_jobs_cost_model_id_cost_models"


def upgrade() -> None:
    op.create_table(
        "cost_models",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("family", sa.String(255), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("objective", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("trained_on", sa.Integer(), nullable=False),
        sa.Column("workloads", sa.Integer(), nullable=False),
        sa.Column("last_measurement_id", sa.Integer(), nullable=False),
        sa.Column("scores", sa.JSON(), nullable=True),
        sa.Column("booster", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cost_models")),
        sa.UniqueConstraint("family", "version", name=op.f("uq_cost_models_family_version")),
    )
    op.create_table(
        "candidate_features",
        sa.Column(
            "candidate_id",
            sa.Integer(),
            sa.ForeignKey(
                "candidates.id", name=op.f("fk_candidate_features_candidate_id_candidates")
            ),
            nullable=False,
        ),
        sa.Column("extractor", sa.String(64), nullable=False),
        sa.Column("features", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("candidate_id", "extractor", name=op.f("pk_candidate_features")),
    )
    with op.batch_alter_table("tuning_jobs") as batch:
        batch.add_column(
            sa.Column(
                "cost_model_id",
                sa.Integer(),
                sa.ForeignKey("cost_models.id", name=op.f(_JOB_MODEL_FK)),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("tuning_jobs") as batch:
        batch.drop_constraint(op.f(_JOB_MODEL_FK), type_="foreignkey")
        batch.drop_column("cost_model_id")
    op.drop_table("candidate_features")
    op.drop_table("cost_models")
