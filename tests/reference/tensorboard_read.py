"""TensorBoard itself reading Loom's event files: every scalar of a run directory as JSON
{tag: [[step, value], ...]}.

  tensorboard_read.py DIR
"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

events = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})  # 0: keep every event, not a sample
events.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}))
