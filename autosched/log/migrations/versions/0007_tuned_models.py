"""Whole models tuned for a target, with their tasks: each task's workload, weight and why it
keeps TVM's default schedule if it does.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tuned_models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column(
            "target_id",
            sa.Integer(),
            sa.ForeignKey("targets.id", name=op.f("fk_tuned_models_target_id_targets")),
            nullable=False,
        ),
        sa.Column("estimated_secs", sa.Double(), nullable=False),
        sa.Column("untuned_secs", sa.Double(), nullable=False),
        sa.Column("reference", sa.String(255), nullable=False),
        sa.Column("max_abs_error", sa.Double(), nullable=False),
        sa.Column("tuned_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuned_models")),
        sa.UniqueConstraint("key", "target_id", name=op.f("uq_tuned_models_key_target_id")),
    )
    op.create_table(
        "tuned_model_tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column(
            "model_id",
            sa.Integer(),
            sa.ForeignKey(
                "tuned_models.id", name=op.f("fk_tuned_model_tasks_model_id_tuned_models")
            ),
            nullable=False,
        ),
        sa.Column(
            "workload_id",
            sa.Integer(),
            sa.ForeignKey("workloads.id", name=op.f("fk_tuned_model_tasks_workload_id_workloads")),
            nullable=True,
        ),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.Column("default_schedule", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuned_model_tasks")),
        sa.UniqueConstraint("model_id", "name", name=op.f("uq_tuned_model_tasks_model_id_name")),
    )
    op.create_index(op.f("ix_tuned_model_tasks_model_id"), "tuned_model_tasks", ["model_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_tuned_model_tasks_model_id"), table_name="tuned_model_tasks")
    op.drop_table("tuned_model_tasks")
    op.drop_table("tuned_models")
