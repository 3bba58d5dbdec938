"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-22
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('artifacts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('target', sa.String(length=32), nullable=False),
    sa.Column('compiler', sa.String(length=64), nullable=False),
    sa.Column('data', sa.LargeBinary(), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('resources', JSONType, nullable=False),
    sa.Column('log', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_artifacts')),
    sa.UniqueConstraint('key', name=op.f('uq_artifacts_key'))
    )
    op.create_table('environments',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('gpu_name', sa.String(length=128), nullable=False),
    sa.Column('arch', sa.String(length=32), nullable=False),
    sa.Column('sm_count', sa.Integer(), nullable=False),
    sa.Column('driver', sa.String(length=64), nullable=False),
    sa.Column('compiler', sa.String(length=64), nullable=False),
    sa.Column('runtime', sa.String(length=64), nullable=False),
    sa.Column('farm_version', sa.String(length=32), nullable=False),
    sa.Column('replay_of', sa.String(length=64), nullable=True),
    sa.Column('details', JSONType, nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_environments')),
    sa.UniqueConstraint('fingerprint', name=op.f('uq_environments_fingerprint'))
    )
    with op.batch_alter_table('environments', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_environments_arch'), ['arch'], unique=False)

    op.create_table('jobs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('operator', sa.String(length=32), nullable=False),
    sa.Column('dtype', sa.String(length=8), nullable=False),
    sa.Column('spec', JSONType, nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('total_pairs', sa.Integer(), nullable=False),
    sa.Column('done_pairs', sa.Integer(), nullable=False),
    sa.Column('failed_pairs', sa.Integer(), nullable=False),
    sa.Column('cached_pairs', sa.Integer(), nullable=False),
    sa.Column('claimed_by', sa.String(length=128), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs'))
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index('ix_jobs_queue', ['status', 'priority', 'id'], unique=False)

    op.create_table('kernels',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('family', sa.String(length=64), nullable=False),
    sa.Column('operator', sa.String(length=32), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('config', JSONType, nullable=False),
    sa.Column('source_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_kernels')),
    sa.UniqueConstraint('key', name=op.f('uq_kernels_key'))
    )
    with op.batch_alter_table('kernels', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_kernels_family'), ['family'], unique=False)
        batch_op.create_index(batch_op.f('ix_kernels_operator'), ['operator'], unique=False)

    op.create_table('problems',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('operator', sa.String(length=32), nullable=False),
    sa.Column('dtype', sa.String(length=8), nullable=False),
    sa.Column('layout', sa.String(length=16), nullable=False),
    sa.Column('n', sa.Integer(), nullable=False),
    sa.Column('c', sa.Integer(), nullable=False),
    sa.Column('k', sa.Integer(), nullable=False),
    sa.Column('g', sa.Integer(), nullable=False),
    sa.Column('h', sa.Integer(), nullable=False),
    sa.Column('w', sa.Integer(), nullable=False),
    sa.Column('r', sa.Integer(), nullable=False),
    sa.Column('s', sa.Integer(), nullable=False),
    sa.Column('stride_h', sa.Integer(), nullable=False),
    sa.Column('stride_w', sa.Integer(), nullable=False),
    sa.Column('pad_h', sa.Integer(), nullable=False),
    sa.Column('pad_w', sa.Integer(), nullable=False),
    sa.Column('dil_h', sa.Integer(), nullable=False),
    sa.Column('dil_w', sa.Integer(), nullable=False),
    sa.Column('flops', sa.BigInteger(), nullable=False),
    sa.Column('min_bytes', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_problems')),
    sa.UniqueConstraint('key', name=op.f('uq_problems_key'))
    )
    with op.batch_alter_table('problems', schema=None) as batch_op:
        batch_op.create_index('ix_problems_shape', ['operator', 'dtype', 'g', 'c', 'k'], unique=False)

    op.create_table('job_problems',
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('problem_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_problems_job_id_jobs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['problem_id'], ['problems.id'], name=op.f('fk_job_problems_problem_id_problems')),
    sa.PrimaryKeyConstraint('job_id', 'problem_id', name=op.f('pk_job_problems'))
    )
    with op.batch_alter_table('job_problems', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_problems_problem_id'), ['problem_id'], unique=False)

    op.create_table('measurements',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('kernel_id', sa.Integer(), nullable=False),
    sa.Column('problem_id', sa.Integer(), nullable=False),
    sa.Column('environment_id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('median_us', sa.Float(), nullable=True),
    sa.Column('min_us', sa.Float(), nullable=True),
    sa.Column('max_us', sa.Float(), nullable=True),
    sa.Column('p90_us', sa.Float(), nullable=True),
    sa.Column('samples', sa.Integer(), nullable=False),
    sa.Column('spread', sa.Float(), nullable=True),
    sa.Column('tflops', sa.Float(), nullable=True),
    sa.Column('gbps', sa.Float(), nullable=True),
    sa.Column('verify_error', sa.Float(), nullable=True),
    sa.Column('message', sa.Text(), nullable=True),
    sa.Column('policy', JSONType, nullable=False),
    sa.Column('telemetry', JSONType, nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['environment_id'], ['environments.id'], name=op.f('fk_measurements_environment_id_environments')),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_measurements_job_id_jobs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['kernel_id'], ['kernels.id'], name=op.f('fk_measurements_kernel_id_kernels')),
    sa.ForeignKeyConstraint(['problem_id'], ['problems.id'], name=op.f('fk_measurements_problem_id_problems')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_measurements')),
    sa.UniqueConstraint('kernel_id', 'problem_id', 'environment_id', name=op.f('uq_measurements_kernel_id_problem_id_environment_id'))
    )
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_measurements_job_id'), ['job_id'], unique=False)
        batch_op.create_index('ix_measurements_problem_env', ['problem_id', 'environment_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_measurements_status'), ['status'], unique=False)

    op.create_table('models',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('operator', sa.String(length=32), nullable=False),
    sa.Column('arch', sa.String(length=32), nullable=False),
    sa.Column('dtype', sa.String(length=8), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('metrics', JSONType, nullable=False),
    sa.Column('data_window', JSONType, nullable=False),
    sa.Column('artifact_id', sa.Integer(), nullable=True),
    sa.Column('promoted', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['artifact_id'], ['artifacts.id'], name=op.f('fk_models_artifact_id_artifacts')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_models')),
    sa.UniqueConstraint('operator', 'arch', 'dtype', 'version', name=op.f('uq_models_operator_arch_dtype_version'))
    )
    op.create_table('measurement_history',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('measurement_id', sa.Integer(), nullable=False),
    sa.Column('kernel_id', sa.Integer(), nullable=False),
    sa.Column('problem_id', sa.Integer(), nullable=False),
    sa.Column('environment_id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('archived_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('median_us', sa.Float(), nullable=True),
    sa.Column('min_us', sa.Float(), nullable=True),
    sa.Column('max_us', sa.Float(), nullable=True),
    sa.Column('p90_us', sa.Float(), nullable=True),
    sa.Column('samples', sa.Integer(), nullable=False),
    sa.Column('spread', sa.Float(), nullable=True),
    sa.Column('tflops', sa.Float(), nullable=True),
    sa.Column('gbps', sa.Float(), nullable=True),
    sa.Column('verify_error', sa.Float(), nullable=True),
    sa.Column('message', sa.Text(), nullable=True),
    sa.Column('policy', JSONType, nullable=False),
    sa.Column('telemetry', JSONType, nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['measurement_id'], ['measurements.id'], name=op.f('fk_measurement_history_measurement_id_measurements'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_measurement_history'))
    )
    with op.batch_alter_table('measurement_history', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_measurement_history_measurement_id'), ['measurement_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_measurement_history_status'), ['status'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('measurement_history', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_measurement_history_status'))
        batch_op.drop_index(batch_op.f('ix_measurement_history_measurement_id'))

    op.drop_table('measurement_history')
    op.drop_table('models')
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_measurements_status'))
        batch_op.drop_index('ix_measurements_problem_env')
        batch_op.drop_index(batch_op.f('ix_measurements_job_id'))

    op.drop_table('measurements')
    with op.batch_alter_table('job_problems', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_problems_problem_id'))

    op.drop_table('job_problems')
    with op.batch_alter_table('problems', schema=None) as batch_op:
        batch_op.drop_index('ix_problems_shape')

    op.drop_table('problems')
    with op.batch_alter_table('kernels', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_kernels_operator'))
        batch_op.drop_index(batch_op.f('ix_kernels_family'))

    op.drop_table('kernels')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_queue')

    op.drop_table('jobs')
    with op.batch_alter_table('environments', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_environments_arch'))

    op.drop_table('environments')
    op.drop_table('artifacts')
