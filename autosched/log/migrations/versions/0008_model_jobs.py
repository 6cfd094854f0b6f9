"""Model jobs of the service: an uploaded ONNX model with its inputs, target and budget, its
tasks (workload, weight, records reused) and its rounds, each a tuning job of one task.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "model_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("onnx", sa.LargeBinary(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column(
            "target_id",
            sa.Integer(),
            sa.ForeignKey("targets.id", name=op.f("fk_model_jobs_target_id_targets")),
            nullable=False,
        ),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(255), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("output_check", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_jobs")),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'finished', 'interrupted', 'failed', 'cancelled')",
            name=op.f("ck_model_jobs_status"),
        ),
        sa.CheckConstraint("trials >= 0", name=op.f("ck_model_jobs_trials")),
        sa.CheckConstraint("batch_size >= 1", name=op.f("ck_model_jobs_batch_size")),
    )
    op.create_table(
        "model_job_tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column(
            "model_job_id",
            sa.Integer(),
            sa.ForeignKey("model_jobs.id", name=op.f("fk_model_job_tasks_model_job_id_model_jobs")),
            nullable=False,
        ),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.Column(
            "workload_id",
            sa.Integer(),
            sa.ForeignKey("workloads.id", name=op.f("fk_model_job_tasks_workload_id_workloads")),
            nullable=True,
        ),
        sa.Column("default_schedule", sa.Text(), nullable=True),
        sa.Column("reused_records", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_job_tasks")),
        sa.UniqueConstraint(
            "model_job_id", "position", name=op.f("uq_model_job_tasks_model_job_id_position")
        ),
    )
    op.create_index(op.f("ix_model_job_tasks_model_job_id"), "model_job_tasks", ["model_job_id"])
    op.create_table(
        "model_job_rounds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column(
            "model_job_id",
            sa.Integer(),
            sa.ForeignKey(
                "model_jobs.id", name=op.f("fk_model_job_rounds_model_job_id_model_jobs")
            ),
            nullable=False,
        ),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("task", sa.Integer(), nullable=False),
        sa.Column(
            "job_id",
            sa.Integer(),
            sa.ForeignKey("tuning_jobs.id", name=op.f("fk_model_job_rounds_job_id_tuning_jobs")),
            nullable=False,
        ),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("measured", sa.Integer(), nullable=True),
        sa.Column("best_secs", sa.Double(), nullable=True),
        sa.Column("task_finished", sa.Boolean(), nullable=True),
        sa.Column("problem", sa.Text(), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_job_rounds")),
        sa.UniqueConstraint(
            "model_job_id", "position", name=op.f("uq_model_job_rounds_model_job_id_position")
        ),
        sa.UniqueConstraint("job_id", name=op.f("uq_model_job_rounds_job_id")),
    )
    op.create_index(op.f("ix_model_job_rounds_model_job_id"), "model_job_rounds", ["model_job_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_model_job_rounds_model_job_id"), table_name="model_job_rounds")
    op.drop_table("model_job_rounds")
    op.drop_index(op.f("ix_model_job_tasks_model_job_id"), table_name="model_job_tasks")
    op.drop_table("model_job_tasks")
    op.drop_table("model_jobs")
