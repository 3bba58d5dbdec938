"""workers: the coordinator's measure processes and what each is doing

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from alembic import op
import sqlalchemy as sa

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('workers',
    sa.Column('name', sa.String(length=160), nullable=False),
    sa.Column('coordinator', sa.String(length=128), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('node', sa.String(length=64), nullable=False),
    sa.Column('gpu_name', sa.String(length=160), nullable=False),
    sa.Column('arch', sa.String(length=32), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('measuring', sa.String(length=400), nullable=True),
    sa.Column('pairs_done', sa.Integer(), nullable=False),
    sa.Column('restarts', sa.Integer(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_workers'))
    )
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_workers_coordinator'), ['coordinator'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_workers_coordinator'))
    op.drop_table('workers')
