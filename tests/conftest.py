import os
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Models the tests build, and the Hugging Face cache they look at, stay inside the test run.
_scratch = tempfile.mkdtemp(prefix="kvscope-tests-")
os.environ["KVSCOPE_CACHE_DIR"] = os.path.join(_scratch, "kvscope")
os.environ["HF_HUB_CACHE"] = os.path.join(_scratch, "hf-hub")
os.environ["HF_HUB_OFFLINE"] = "1"
