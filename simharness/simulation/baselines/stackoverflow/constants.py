"""Default values of the Stack Overflow tasks (TFF's ``baselines/stackoverflow/constants``)."""

DEFAULT_SEQUENCE_LENGTH = 20
DEFAULT_SHUFFLE_BUFFER_SIZE = 1000
DEFAULT_TAG_VOCAB_SIZE = 500
DEFAULT_WORD_VOCAB_SIZE = 10000
