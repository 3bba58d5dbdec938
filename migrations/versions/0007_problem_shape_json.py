"""a problem keeps its shape fields as JSON (JSONB on PostgreSQL), whatever its operator: the
one-column-per-convolution-field layout goes; keys, ids and every row stay

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

# The columns of revision 0006, in the convolution record's field order, and their JSON names.
FIELDS = {'n': 'N', 'c': 'C', 'k': 'K', 'g': 'G', 'h': 'H', 'w': 'W', 'r': 'R', 's': 'S',
          'stride_h': 'stride_h', 'stride_w': 'stride_w', 'pad_h': 'pad_h', 'pad_w': 'pad_w',
          'dil_h': 'dil_h', 'dil_w': 'dil_w'}
JSON = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')


def _shape_sql(dialect: str) -> str:
    """The SQL expression that builds each row's shape object from its columns."""
    if dialect == 'postgresql':
        pairs = ', '.join(f"'{name}', {column}" for column, name in FIELDS.items())
        return f'jsonb_build_object({pairs})'
    pairs = ', '.join(f"'{name}', {column}" for column, name in FIELDS.items())
    return f'json_object({pairs})'


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    with op.batch_alter_table('problems', schema=None) as batch_op:
        batch_op.add_column(sa.Column('shape', JSON, nullable=True))
    op.execute(f'UPDATE problems SET shape = {_shape_sql(dialect)}')
    with op.batch_alter_table('problems', schema=None) as batch_op:
        batch_op.alter_column('shape', existing_type=JSON, nullable=False)
        batch_op.drop_index('ix_problems_shape')
        for column in FIELDS:
            batch_op.drop_column(column)
        batch_op.create_index('ix_problems_operator_dtype', ['operator', 'dtype'], unique=False)


def downgrade() -> None:
    """Back to one column per convolution field; refuses a database that holds problems of
    any other operator (revision 0006 cannot keep them)."""
    other = op.get_bind().execute(sa.text(
        "SELECT count(*) FROM problems WHERE operator NOT LIKE 'conv2d_%'")).scalar()
    if other:
        raise RuntimeError(f'{other} problems are not convolutions; revision 0006 cannot '
                           'keep them')
    dialect = op.get_bind().dialect.name
    with op.batch_alter_table('problems', schema=None) as batch_op:
        for column in FIELDS:
            batch_op.add_column(sa.Column(column, sa.Integer(), nullable=True))
    for column, name in FIELDS.items():
        value = (f"(shape->>'{name}')::integer" if dialect == 'postgresql'
                 else f"json_extract(shape, '$.{name}')")
        op.execute(f'UPDATE problems SET {column} = {value}')
    with op.batch_alter_table('problems', schema=None) as batch_op:
        for column in FIELDS:
            batch_op.alter_column(column, existing_type=sa.Integer(), nullable=False)
        batch_op.drop_index('ix_problems_operator_dtype')
        batch_op.create_index('ix_problems_shape', ['operator', 'dtype', 'g', 'c', 'k'],
                              unique=False)
        batch_op.drop_column('shape')
