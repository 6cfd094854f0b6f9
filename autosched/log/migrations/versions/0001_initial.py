"""Initial schema: workloads, targets, devices, tuning jobs, candidates, measurements, best records.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.Integer(), primary_key=True)


def _timestamp(name: str, *, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _fk(table: str, column: str, referred: str, *, nullable: bool = False) -> sa.Column[int]:
    foreign_key = sa.ForeignKey(f"{referred}.id", name=op.f(f"fk_{table}_{column}_{referred}"))
    return sa.Column(column, sa.Integer(), foreign_key, nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "workloads",
        _id(),
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("tvmscript", sa.Text(), nullable=False),
        sa.Column("flops", sa.Double(), nullable=True),
        _timestamp("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
        sa.UniqueConstraint("key", name=op.f("uq_workloads_key")),
    )
    op.create_table(
        "targets",
        _id(),
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("kind", sa.String(255), nullable=False),
        sa.Column("target_json", sa.JSON(), nullable=False),
        _timestamp("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_targets")),
        sa.UniqueConstraint("key", name=op.f("uq_targets_key")),
    )
    op.create_table(
        "devices",
        _id(),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("fingerprint", sa.JSON(), nullable=False),
        _timestamp("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_devices")),
        sa.UniqueConstraint("key", name=op.f("uq_devices_key")),
    )
    op.create_table(
        "tuning_jobs",
        _id(),
        _fk("tuning_jobs", "workload_id", "workloads"),
        _fk("tuning_jobs", "target_id", "targets"),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(255), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        _timestamp("created_at", nullable=False),
        _timestamp("started_at", nullable=True),
        _timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuning_jobs")),
        sa.CheckConstraint(
            "status IN ('running', 'finished', 'interrupted', 'failed')",
            name=op.f("ck_tuning_jobs_status"),
        ),
        sa.CheckConstraint("trials >= 0", name=op.f("ck_tuning_jobs_trials")),
        sa.CheckConstraint("batch_size >= 1", name=op.f("ck_tuning_jobs_batch_size")),
    )
    op.create_index(
        op.f("ix_tuning_jobs_workload_id_target_id"), "tuning_jobs", ["workload_id", "target_id"]
    )
    op.create_table(
        "candidates",
        _id(),
        _fk("candidates", "job_id", "tuning_jobs", nullable=True),
        _fk("candidates", "workload_id", "workloads"),
        _fk("candidates", "target_id", "targets"),
        sa.Column("trace_json", sa.Text(), nullable=False),
        sa.Column("program_hash", sa.String(128), nullable=False),
        sa.Column("predicted_score", sa.Double(), nullable=True),
        _timestamp("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidates")),
        sa.UniqueConstraint(
            "workload_id",
            "target_id",
            "program_hash",
            name=op.f("uq_candidates_workload_id_target_id_program_hash"),
        ),
    )
    op.create_index(op.f("ix_candidates_job_id"), "candidates", ["job_id"])
    op.create_table(
        "measurements",
        _id(),
        _fk("measurements", "candidate_id", "candidates"),
        _fk("measurements", "device_id", "devices", nullable=True),
        sa.Column("samples", sa.JSON(), nullable=False),
        sa.Column("median_secs", sa.Double(), nullable=True),
        sa.Column("error_kind", sa.String(32), nullable=True),
        sa.Column("error_msg", sa.Text(), nullable=True),
        sa.Column("verified", sa.Boolean(), nullable=False),
        sa.Column("build_secs", sa.Double(), nullable=True),
        _timestamp("started_at", nullable=True),
        _timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_measurements")),
        sa.UniqueConstraint("candidate_id", name=op.f("uq_measurements_candidate_id")),
        sa.CheckConstraint(
            "median_secs IS NULL OR median_secs >= 0", name=op.f("ck_measurements_median_secs")
        ),
        sa.CheckConstraint(
            "error_kind IS NULL OR median_secs IS NULL",
            name=op.f("ck_measurements_error_has_no_median"),
        ),
    )
    op.create_index(op.f("ix_measurements_median_secs"), "measurements", ["median_secs"])
    op.create_table(
        "best_records",
        _fk("best_records", "workload_id", "workloads"),
        _fk("best_records", "target_id", "targets"),
        _fk("best_records", "candidate_id", "candidates"),
        sa.Column("median_secs", sa.Double(), nullable=False),
        _timestamp("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("workload_id", "target_id", name=op.f("pk_best_records")),
    )


def downgrade() -> None:
    for table in (
        "best_records",
        "measurements",
        "candidates",
        "tuning_jobs",
        "devices",
        "targets",
        "workloads",
    ):
        op.drop_table(table)
