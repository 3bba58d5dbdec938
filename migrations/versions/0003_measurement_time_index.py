"""an index on measurements (created_at, status): the overview's rates per minute read only it

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_measurements_created_status', 'measurements', ['created_at', 'status'])


def downgrade() -> None:
    op.drop_index('ix_measurements_created_status', table_name='measurements')
