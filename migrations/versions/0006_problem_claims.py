"""job problems are claimed one by one (state, claimed_by, updated_at), so several coordinators
share one job; the problems of finished jobs are done

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from alembic import op
import sqlalchemy as sa

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job_problems', schema=None) as batch_op:
        batch_op.add_column(sa.Column('state', sa.String(length=16), nullable=False,
                                      server_default='open'))
        batch_op.add_column(sa.Column('claimed_by', sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column('updated_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index('ix_job_problems_job_state', ['job_id', 'state'], unique=False)
    op.execute("UPDATE job_problems SET state = 'done' WHERE job_id IN "
               "(SELECT id FROM jobs WHERE status IN ('done', 'failed', 'cancelled'))")


def downgrade() -> None:
    with op.batch_alter_table('job_problems', schema=None) as batch_op:
        batch_op.drop_index('ix_job_problems_job_state')
        batch_op.drop_column('updated_at')
        batch_op.drop_column('claimed_by')
        batch_op.drop_column('state')
