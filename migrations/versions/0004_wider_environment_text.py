"""wider environment text: compiler and runtime versions name their packages (over 64 chars)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from alembic import op
import sqlalchemy as sa

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

WIDER = {'driver': (64, 200), 'compiler': (64, 200), 'runtime': (64, 200),
         'farm_version': (32, 64)}


def upgrade() -> None:
    with op.batch_alter_table('environments') as table:
        for column, (old, new) in WIDER.items():
            table.alter_column(column, type_=sa.String(length=new),
                               existing_type=sa.String(length=old), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('environments') as table:
        for column, (old, new) in WIDER.items():
            table.alter_column(column, type_=sa.String(length=old),
                               existing_type=sa.String(length=new), existing_nullable=False)
