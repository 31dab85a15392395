"""`BaselineTaskDatasets`: a task's data and its preprocessing (TFF's ``task_data``)."""

from __future__ import annotations

import collections
from typing import Any, Callable, List, Optional, Union

import numpy as np
import tensorflow as tf

from simharness.data.client_base import ClientData

__all__ = ['BaselineTaskDatasets', 'CentralOrClientData', 'PreprocessFnType']

#: Test or validation data: federated (a `ClientData`) or centralized (a `tf.data.Dataset`).
CentralOrClientData = Union[tf.data.Dataset, ClientData]
#: A dataset-to-dataset function (or a computation of that type).
PreprocessFnType = Callable[[tf.data.Dataset], tf.data.Dataset]


def _get_element_spec(
    data: CentralOrClientData, preprocess_fn: Optional[PreprocessFnType] = None
) -> Any:
    """The element structure of `data` (a `ClientData` or a dataset) after `preprocess_fn`."""
    if isinstance(data, ClientData):
        if preprocess_fn is not None:
            data = data.preprocess(preprocess_fn)
        return data.element_type_structure
    if preprocess_fn is not None:
        data = preprocess_fn(data)
    return data.element_spec


def _split_row(label: str, data: CentralOrClientData) -> list:
    if isinstance(data, ClientData):
        return [label, 'Federated', len(data.client_ids)]
    return [label, 'Centralized', 'N/A']


class BaselineTaskDatasets:
    """The train, test and (optional) validation data of a task, and their preprocessing.

    Attributes:
      train_data: the training `ClientData`.
      test_data: a `ClientData` or a `tf.data.Dataset`.
      validation_data: a `ClientData`, a `tf.data.Dataset` or `None`.
      train_preprocess_fn: the dataset-to-dataset function applied to each
        training client's dataset, or `None` (identity).
      eval_preprocess_fn: the same for evaluation (test, validation) data.
      element_type_structure: the `tf.TensorSpec` structure of a training
        element after `train_preprocess_fn`.
    """

    def __init__(
        self,
        train_data: ClientData,
        test_data: CentralOrClientData,
        validation_data: Optional[CentralOrClientData] = None,
        train_preprocess_fn: Optional[PreprocessFnType] = None,
        eval_preprocess_fn: Optional[PreprocessFnType] = None,
    ):
        """Records the data and checks the preprocessing functions.

        Raises:
          ValueError: a preprocessing function that is neither `None` nor
            callable, or `validation_data` whose element structure is not the
            test data's.
        """
        if train_preprocess_fn is not None and not callable(train_preprocess_fn):
            raise ValueError('The train_preprocess_fn must be None or callable.')
        if eval_preprocess_fn is not None and not callable(eval_preprocess_fn):
            raise ValueError('The eval_preprocess_fn must be None or callable.')
        self._train_data = train_data
        self._test_data = test_data
        self._validation_data = validation_data
        self._train_preprocess_fn = train_preprocess_fn
        self._eval_preprocess_fn = eval_preprocess_fn
        if train_preprocess_fn is None:
            self._preprocess_train_data = train_data
        else:
            self._preprocess_train_data = train_data.preprocess(train_preprocess_fn)
        # As TFF: the element structure is the preprocessed training data's; the test
        # data is not checked against it (TFF's b/249818282).
        self._element_type_structure = self._preprocess_train_data.element_type_structure
        if validation_data is not None:
            test_type = _get_element_spec(test_data)
            validation_type = _get_element_spec(validation_data)
            if test_type != validation_type:
                raise ValueError(
                    'The validation set must be None, or have the same element type structure '
                    f'as the test data. Found test type {test_type} and validation type '
                    f'{validation_type}'
                )
        self._data_info: Optional[collections.OrderedDict] = None

    @property
    def train_data(self) -> ClientData:
        return self._train_data

    @property
    def test_data(self) -> CentralOrClientData:
        return self._test_data

    @property
    def validation_data(self) -> Optional[CentralOrClientData]:
        return self._validation_data

    @property
    def train_preprocess_fn(self) -> Optional[PreprocessFnType]:
        return self._train_preprocess_fn

    @property
    def eval_preprocess_fn(self) -> Optional[PreprocessFnType]:
        return self._eval_preprocess_fn

    @property
    def element_type_structure(self) -> Any:
        return self._element_type_structure

    def _record_dataset_information(self) -> collections.OrderedDict:
        """The rows of `summary`: header, train, test and (when present) validation."""
        info: 'collections.OrderedDict[str, List[Any]]' = collections.OrderedDict()
        info['header'] = ['Split', 'Dataset Type', 'Number of Clients']
        info['train'] = ['Train', 'Federated', len(self._train_data.client_ids)]
        info['test'] = _split_row('Test', self._test_data)
        if self._validation_data is not None:
            info['validation'] = _split_row('Validation', self._validation_data)
        return info

    def sample_train_clients(
        self, num_clients: int, replace: bool = False, random_seed: Optional[int] = None
    ) -> list:
        """`num_clients` preprocessed training datasets of clients drawn uniformly at random.

        Args:
          num_clients: how many clients to draw.
          replace: draw with replacement (else `num_clients` must not exceed
            the number of training clients).
          random_seed: the seed of the `np.random.RandomState` drawing them
            (`None`: seeded from the system, different each call).

        Returns:
          A list of `tf.data.Dataset`, one per drawn client.
        """
        random_state = np.random.RandomState(seed=random_seed)
        client_ids = random_state.choice(
            self._preprocess_train_data.client_ids, size=num_clients, replace=replace
        )
        return [self._preprocess_train_data.create_tf_dataset_for_client(c) for c in client_ids]

    def get_centralized_test_data(self) -> tf.data.Dataset:
        """The test data as one `tf.data.Dataset` (clients' datasets joined), preprocessed."""
        test_data = self._test_data
        if isinstance(test_data, ClientData):
            test_data = test_data.create_tf_dataset_from_all_clients()
        if self._eval_preprocess_fn is not None:
            test_data = self._eval_preprocess_fn(test_data)
        return test_data

    def summary(self, print_fn: Callable[[str], Any] = print) -> None:
        """Prints a table of the splits (type and number of clients), then two lines
        saying whether there are train and eval preprocessing functions.

        ::

            Split      |Dataset Type |Number of Clients |
            =============================================
            Train      |Federated    |10                |
            Test       |Centralized  |N/A               |
            _____________________________________________
            Train Preprocess Function: True
            Eval Preprocess Function: False

        Args:
          print_fn: called with each line (``summary_list.append`` collects them).
        """
        if self._data_info is None:
            self._data_info = self._record_dataset_information()
        rows = list(self._data_info.values())
        widths = [max(len(str(row[j])) for row in rows) + 1 for j in range(len(rows[0]))]
        lines = [
            ''.join(f'{str(value):<{width}}|' for value, width in zip(row, widths)) for row in rows
        ]
        total = sum(widths) + len(widths)
        lines.insert(1, '=' * total)
        lines.append('_' * total)
        for line in lines:
            print_fn(line)
        print_fn(f'Train Preprocess Function: {self._train_preprocess_fn is not None}')
        print_fn(f'Eval Preprocess Function: {self._eval_preprocess_fn is not None}')
