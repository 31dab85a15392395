"""TFF 0.88's ``docs/tutorials/custom_aggregators.ipynb``, renamed.

Every code cell runs as written (no data to replace) on the default context,
and what it prints equals the output recorded in TFF's notebook (numpy 2
prints ``np.float32(8.0)`` where the recorded output has ``8.0``; blank lines
aside). Left out: ``!pip``.
"""

import re

#: The output recorded in TFF's notebook, cells 29, 35, 41, 47 and 49.
RECORDED = '''
Type signatures of the created aggregation process:
  - initialize: ( -> <>@SERVER)
  - next: (<state=<>@SERVER,value={float32}@CLIENTS> -> <state=<>@SERVER,result=float32@SERVER,measurements=<>@SERVER>)

Aggregation result: 8.0  (expected 8.0)
Type signatures of the created aggregation process:
  - initialize: ( -> float32@SERVER)
  - next: (<state=float32@SERVER,value={float32}@CLIENTS> -> <state=float32@SERVER,result=float32@SERVER,measurements=float32@SERVER>)

| Round #1
|       Aggregation result: 8.0   (expected 8.0)
| Aggregation measurements: 8.0   (expected 8.0 * 1)

| Round #2
|       Aggregation result: 8.0   (expected 8.0)
| Aggregation measurements: 16.0  (expected 8.0 * 2)

| Round #3
|       Aggregation result: 8.0   (expected 8.0)
| Aggregation measurements: 24.0  (expected 8.0 * 3)
Type signatures of the created aggregation process:
  - initialize: ( -> float32@SERVER)
  - next: (<state=float32@SERVER,value={<float32[2],float32[3]>}@CLIENTS> -> <state=float32@SERVER,result=<float32[2],float32[3]>@SERVER,measurements=<float32[2],float32[3]>@SERVER>)

Aggregation result: [[2. 3.], [6. 4. 0.]]
          Expected: [[2. 3.], [6. 4. 0.]]
| Round #1
|           Aggregation result: 8.0   (expected 8.0)
| measurements['scaled_value']: 8.0
| measurements['example_task']: ()

| Round #2
|           Aggregation result: 8.0   (expected 8.0)
| measurements['scaled_value']: 16.0
| measurements['example_task']: ()
| Round #1
|           Aggregation result: 8.0   (expected 8.0)
| measurements['scaled_value']: 8.0
| measurements['example_task']: OrderedDict([('scaled_value', 8.0), ('example_task', ())])

| Round #2
|           Aggregation result: 8.0   (expected 8.0)
| measurements['scaled_value']: 16.0
| measurements['example_task']: OrderedDict([('scaled_value', 32.0), ('example_task', ())])
'''


def _lines(text):
    text = re.sub(r'np\.float32\(([^)]*)\)', r'\1', text)
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def test_custom_aggregators_tutorial(capsys):
    # cell 21
    import collections

    import simharness as federated_language
    import numpy as np
    import tensorflow as tf
    import simharness as tff

    # cell 27
    class ExampleTaskFactory(tff.aggregators.UnweightedAggregationFactory):

      def create(self, value_type):
        @federated_language.federated_computation()
        def initialize_fn():
          return federated_language.federated_value((), federated_language.SERVER)

        @federated_language.federated_computation(
            initialize_fn.type_signature.result,
            federated_language.FederatedType(
                value_type, federated_language.CLIENTS
            ),
        )
        def next_fn(state, value):
          scaled_value = federated_language.federated_map(
              tff.tensorflow.computation(lambda x: x * 2.0), value
          )
          summed_value = federated_language.federated_sum(scaled_value)
          unscaled_value = federated_language.federated_map(
              tff.tensorflow.computation(lambda x: x / 2.0), summed_value
          )
          measurements = federated_language.federated_value(
              (), federated_language.SERVER
          )
          return tff.templates.MeasuredProcessOutput(
              state=state, result=unscaled_value, measurements=measurements
          )

        return tff.templates.AggregationProcess(initialize_fn, next_fn)

    # cell 29
    client_data = [1.0, 2.0, 5.0]
    factory = ExampleTaskFactory()
    aggregation_process = factory.create(federated_language.TensorType(np.float32))
    print(
        'Type signatures of the created aggregation process:\n'
        f'  - initialize: {aggregation_process.initialize.type_signature}\n'
        f'  - next: {aggregation_process.next.type_signature}\n'
    )

    state = aggregation_process.initialize()
    output = aggregation_process.next(state, client_data)
    print(f'Aggregation result: {output.result}  (expected 8.0)')

    # cell 33
    class ExampleTaskFactory(tff.aggregators.UnweightedAggregationFactory):

      def create(self, value_type):
        @federated_language.federated_computation()
        def initialize_fn():
          return federated_language.federated_value(0.0, federated_language.SERVER)

        @federated_language.federated_computation(
            initialize_fn.type_signature.result,
            federated_language.FederatedType(
                value_type, federated_language.CLIENTS
            ),
        )
        def next_fn(state, value):
          new_state = federated_language.federated_map(
              tff.tensorflow.computation(lambda x: x + 1.0), state
          )
          state_at_clients = federated_language.federated_broadcast(new_state)
          scaled_value = federated_language.federated_map(
              tff.tensorflow.computation(lambda x, y: x * y),
              (value, state_at_clients),
          )
          summed_value = federated_language.federated_sum(scaled_value)
          unscaled_value = federated_language.federated_map(
              tff.tensorflow.computation(lambda x, y: x / y),
              (summed_value, new_state),
          )
          return tff.templates.MeasuredProcessOutput(
              state=new_state, result=unscaled_value, measurements=summed_value
          )

        return tff.templates.AggregationProcess(initialize_fn, next_fn)

    # cell 35
    client_data = [1.0, 2.0, 5.0]
    factory = ExampleTaskFactory()
    aggregation_process = factory.create(federated_language.TensorType(np.float32))
    print(
        'Type signatures of the created aggregation process:\n'
        f'  - initialize: {aggregation_process.initialize.type_signature}\n'
        f'  - next: {aggregation_process.next.type_signature}\n'
    )

    state = aggregation_process.initialize()

    output = aggregation_process.next(state, client_data)
    print('| Round #1')
    print(f'|       Aggregation result: {output.result}   (expected 8.0)')
    print(f'| Aggregation measurements: {output.measurements}   (expected 8.0 * 1)')

    output = aggregation_process.next(output.state, client_data)
    print('\n| Round #2')
    print(f'|       Aggregation result: {output.result}   (expected 8.0)')
    print(f'| Aggregation measurements: {output.measurements}  (expected 8.0 * 2)')

    output = aggregation_process.next(output.state, client_data)
    print('\n| Round #3')
    print(f'|       Aggregation result: {output.result}   (expected 8.0)')
    print(f'| Aggregation measurements: {output.measurements}  (expected 8.0 * 3)')

    # cell 38
    @tff.tensorflow.computation()
    def scale(value, factor):
      return tf.nest.map_structure(lambda x: x * factor, value)

    @tff.tensorflow.computation()
    def unscale(value, factor):
      return tf.nest.map_structure(lambda x: x / factor, value)

    @tff.tensorflow.computation()
    def add_one(value):
      return value + 1.0

    class ExampleTaskFactory(tff.aggregators.UnweightedAggregationFactory):

      def create(self, value_type):
        @federated_language.federated_computation()
        def initialize_fn():
          return federated_language.federated_value(0.0, federated_language.SERVER)

        @federated_language.federated_computation(
            initialize_fn.type_signature.result,
            federated_language.FederatedType(
                value_type, federated_language.CLIENTS
            ),
        )
        def next_fn(state, value):
          new_state = federated_language.federated_map(add_one, state)
          state_at_clients = federated_language.federated_broadcast(new_state)
          scaled_value = federated_language.federated_map(
              scale, (value, state_at_clients)
          )
          summed_value = federated_language.federated_sum(scaled_value)
          unscaled_value = federated_language.federated_map(
              unscale, (summed_value, new_state)
          )
          return tff.templates.MeasuredProcessOutput(
              state=new_state, result=unscaled_value, measurements=summed_value
          )

        return tff.templates.AggregationProcess(initialize_fn, next_fn)

    # cell 41
    client_data = [[[1.0, 2.0], [3.0, 4.0, 5.0]], [[1.0, 1.0], [3.0, 0.0, -5.0]]]
    factory = ExampleTaskFactory()
    aggregation_process = factory.create(
        federated_language.to_type([(np.float32, (2,)), (np.float32, (3,))])
    )
    print(
        'Type signatures of the created aggregation process:\n'
        f'  - initialize: {aggregation_process.initialize.type_signature}\n'
        f'  - next: {aggregation_process.next.type_signature}\n'
    )

    state = aggregation_process.initialize()
    output = aggregation_process.next(state, client_data)
    print(
        f'Aggregation result: [{output.result[0]}, {output.result[1]}]\n'
        '          Expected: [[2. 3.], [6. 4. 0.]]'
    )

    # cell 44
    @tff.tensorflow.computation()
    def scale(value, factor):
      return tf.nest.map_structure(lambda x: x * factor, value)

    @tff.tensorflow.computation()
    def unscale(value, factor):
      return tf.nest.map_structure(lambda x: x / factor, value)

    @tff.tensorflow.computation()
    def add_one(value):
      return value + 1.0

    class ExampleTaskFactory(tff.aggregators.UnweightedAggregationFactory):

      def __init__(self, inner_factory=None):
        if inner_factory is None:
          inner_factory = tff.aggregators.SumFactory()
        self._inner_factory = inner_factory

      def create(self, value_type):
        inner_process = self._inner_factory.create(value_type)

        @federated_language.federated_computation()
        def initialize_fn():
          my_state = federated_language.federated_value(
              0.0, federated_language.SERVER
          )
          inner_state = inner_process.initialize()
          return federated_language.federated_zip((my_state, inner_state))

        @federated_language.federated_computation(
            initialize_fn.type_signature.result,
            federated_language.FederatedType(
                value_type, federated_language.CLIENTS
            ),
        )
        def next_fn(state, value):
          my_state, inner_state = state
          my_new_state = federated_language.federated_map(add_one, my_state)
          my_state_at_clients = federated_language.federated_broadcast(my_new_state)
          scaled_value = federated_language.federated_map(
              scale, (value, my_state_at_clients)
          )

          # Delegation to an inner factory, returning values placed at SERVER.
          inner_output = inner_process.next(inner_state, scaled_value)

          unscaled_value = federated_language.federated_map(
              unscale, (inner_output.result, my_new_state)
          )

          new_state = federated_language.federated_zip(
              (my_new_state, inner_output.state)
          )
          measurements = federated_language.federated_zip(
              collections.OrderedDict(
                  scaled_value=inner_output.result,
                  example_task=inner_output.measurements,
              )
          )

          return tff.templates.MeasuredProcessOutput(
              state=new_state, result=unscaled_value, measurements=measurements
          )

        return tff.templates.AggregationProcess(initialize_fn, next_fn)

    # cell 47
    client_data = [1.0, 2.0, 5.0]
    factory = ExampleTaskFactory()
    aggregation_process = factory.create(federated_language.TensorType(np.float32))
    state = aggregation_process.initialize()

    output = aggregation_process.next(state, client_data)
    print('| Round #1')
    print(f'|           Aggregation result: {output.result}   (expected 8.0)')
    print(
        f'| measurements[\'scaled_value\']: {output.measurements["scaled_value"]}'
    )
    print(
        f'| measurements[\'example_task\']: {output.measurements["example_task"]}'
    )

    output = aggregation_process.next(output.state, client_data)
    print('\n| Round #2')
    print(f'|           Aggregation result: {output.result}   (expected 8.0)')
    print(
        f'| measurements[\'scaled_value\']: {output.measurements["scaled_value"]}'
    )
    print(
        f'| measurements[\'example_task\']: {output.measurements["example_task"]}'
    )

    # cell 49
    client_data = [1.0, 2.0, 5.0]
    # Note the inner delegation can be to any UnweightedAggregaionFactory.
    # In this case, each factory creates process that multiplies by the iteration
    # index (1, 2, 3, ...), thus their combination multiplies by (1, 4, 9, ...).
    factory = ExampleTaskFactory(ExampleTaskFactory())
    aggregation_process = factory.create(federated_language.TensorType(np.float32))
    state = aggregation_process.initialize()

    output = aggregation_process.next(state, client_data)
    print('| Round #1')
    print(f'|           Aggregation result: {output.result}   (expected 8.0)')
    print(
        f'| measurements[\'scaled_value\']: {output.measurements["scaled_value"]}'
    )
    print(
        f'| measurements[\'example_task\']: {output.measurements["example_task"]}'
    )

    output = aggregation_process.next(output.state, client_data)
    print('\n| Round #2')
    print(f'|           Aggregation result: {output.result}   (expected 8.0)')
    print(
        f'| measurements[\'scaled_value\']: {output.measurements["scaled_value"]}'
    )
    print(
        f'| measurements[\'example_task\']: {output.measurements["example_task"]}'
    )


    assert _lines(capsys.readouterr().out) == _lines(RECORDED)
