"""the (problem, environment) index of measurements also carries status, kernel and median time,
so reading one scope's ok timings (the results pages) never touches the table

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index('ix_measurements_problem_env', table_name='measurements')
    op.create_index('ix_measurements_scope', 'measurements',
                    ['problem_id', 'environment_id', 'status', 'kernel_id', 'median_us'])


def downgrade() -> None:
    op.drop_index('ix_measurements_scope', table_name='measurements')
    op.create_index('ix_measurements_problem_env', 'measurements',
                    ['problem_id', 'environment_id'])
