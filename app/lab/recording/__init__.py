"""Record a run to one file and read it back exactly as it happened: no model, no GPU.

docs/recording-format.md is the specification and this package its reference implementation:
format.py (constants, record framing, payload encoding, the error), writer.py (RunRecorder,
attached to a running engine) and reader.py (Recording, opened from a file).
"""

from kvscope.app.lab.recording.format import RecordingError
from kvscope.app.lab.recording.reader import Recording
from kvscope.app.lab.recording.writer import RunRecorder

__all__ = ["Recording", "RecordingError", "RunRecorder"]
