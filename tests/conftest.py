import atexit
import os
import shutil
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Models the tests build, and the Hugging Face cache they look at, stay inside the test run.
_scratch = tempfile.mkdtemp(prefix="kvscope-tests-")
# The models built here are ~400 MB a run: left behind, a few hundred runs filled the disk that CI
# then built the bundle on.
atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
os.environ["KVSCOPE_CACHE_DIR"] = os.path.join(_scratch, "kvscope")
os.environ["HF_HUB_CACHE"] = os.path.join(_scratch, "hf-hub")
os.environ["HF_HUB_OFFLINE"] = "1"
