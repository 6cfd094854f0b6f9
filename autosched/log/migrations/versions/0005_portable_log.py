"""A portable tuning log: every measurement gets an identity that travels with it between logs
(``uid``), its provenance (versions, machine, job), the TVM version it was measured with, and when
it was imported (NULL: measured for this log). A candidate may hold one measurement of this log
and any number imported from others. Tokens gain the ``admin`` role.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LOCAL_CANDIDATE_INDEX = "uq_measurements_local_candidate_id"
_LOCAL = sa.text("imported_at IS NULL")


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("uid", sa.String(32), nullable=True))
        batch.add_column(sa.Column("provenance", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("tvm_version", sa.String(64), nullable=True))
        batch.add_column(sa.Column("imported_at", sa.DateTime(timezone=True), nullable=True))
    connection = op.get_bind()
    ids = [row[0] for row in connection.execute(sa.text("SELECT id FROM measurements"))]
    if ids:
        connection.execute(
            sa.text("UPDATE measurements SET uid = :uid WHERE id = :id"),
            [{"uid": uuid.uuid4().hex, "id": id_} for id_ in ids],
        )
    with op.batch_alter_table("measurements") as batch:
        batch.alter_column("uid", existing_type=sa.String(32), nullable=False)
        batch.create_unique_constraint(op.f("uq_measurements_uid"), ["uid"])
        batch.drop_constraint(op.f("uq_measurements_candidate_id"), type_="unique")
        batch.create_index(op.f("ix_measurements_candidate_id"), ["candidate_id"])
    op.create_index(
        _LOCAL_CANDIDATE_INDEX,
        "measurements",
        ["candidate_id"],
        unique=True,
        sqlite_where=_LOCAL,
        postgresql_where=_LOCAL,
    )
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_constraint(op.f("ck_api_tokens_role"), type_="check")
        batch.create_check_constraint(
            op.f("ck_api_tokens_role"), "role IN ('client', 'worker', 'admin')"
        )


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_constraint(op.f("ck_api_tokens_role"), type_="check")
        batch.create_check_constraint(op.f("ck_api_tokens_role"), "role IN ('client', 'worker')")
    op.execute("DELETE FROM measurements WHERE imported_at IS NOT NULL")
    op.drop_index(_LOCAL_CANDIDATE_INDEX, table_name="measurements")
    with op.batch_alter_table("measurements") as batch:
        batch.drop_index(op.f("ix_measurements_candidate_id"))
        batch.create_unique_constraint(op.f("uq_measurements_candidate_id"), ["candidate_id"])
        batch.drop_constraint(op.f("uq_measurements_uid"), type_="unique")
        batch.drop_column("imported_at")
        batch.drop_column("tvm_version")
        batch.drop_column("provenance")
        batch.drop_column("uid")
