"""The window against bad input, fourteenth round: fields the run reads nowhere, taken without a word.
Trace speed-up 5x on a workload with no trace; an arrival rate, prompt or output length beside a
trace (azure-conv, or a picked CSV), whose rows give them; a prompt length or shared prefix beside
chat text; Requests past a trace's rows (Requests 50,000 ran azure-conv's 19,366, a picked 3-row
trace its 3); a shared prefix (512 tokens) no request could hold (a context of 256 tokens: none was
shared) or longer than the prompts it starts (Prompt length 10: prompts of 513 tokens); KV heads of a
model with latent attention; the hardware form and the editor's hardware boxes on the real backend;
prefix caching with contiguous allocation (0 % hits). And the memory math said "2 x 27 layers x 16
KV heads x 192" beside deepseek-v2-lite's 30.38 KiB a token (a latent of 512 + 64), and a layer
count edited on gemma-2-9b was told to "give one of full_attention, ... per layer", a list the
editor has no field for. Each is refused or greyed where the user is, with why, and a consistent
neighbour is still taken."""

from __future__ import annotations

import re

import pytest
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from kvscope.app.lab.presets import user_preset_names

from test_gui_hostile_thirteenth import enter


def choose(settings, combo, text: str) -> None:
    """A choice made as the user makes it: currentIndexChanged, then activated."""
    combo.setCurrentIndex(combo.findText(text))
    combo.activated.emit(combo.currentIndex())


def refused(settings, key: str) -> str:
    label = settings.errors[key]
    return label.text() if label.isVisible() else ""


def taken(window) -> bool:
    return window.settings_form.current_config() is not None and window.settings.apply_button.isEnabled()


# -- 1. a field the workload's source sets itself ---------------------------------------------------------

def test_a_trace_speed_up_on_a_workload_without_a_trace_is_refused_and_taken_with_one(window, qtbot):
    settings = window.settings
    enter(qtbot, settings.trace_speedup, "5")  # chat: Poisson arrivals; the 5x was read nowhere
    assert refused(settings, "trace_speedup") == (
        "Trace speed-up 5x would be ignored: workload chat has no trace (its requests arrive at its own rate); "
        "set it back to 1x, or pick a trace")
    assert not taken(window)
    choose(settings, settings.workload, "azure-conv")
    assert refused(settings, "trace_speedup") == "" and taken(window)
    assert window.settings_form.current_config().workload.trace_speedup == 5


@pytest.mark.parametrize("key, box, typed, said", [
    ("arrival_rate_per_s", "arrival_rate", "5", "Arrival rate 5 req/s"),
    ("prompt_median", "prompt_median", "100", "Prompt length 100 tokens"),
    ("output_median", "output_median", "100", "Output length 100 tokens"),
])
def test_what_a_traces_rows_give_is_refused_beside_it_and_taken_beside_a_preset(window, qtbot, key, box, typed,
                                                                                  said):
    settings = window.settings
    choose(settings, settings.workload, "azure-conv")
    assert taken(window)
    enter(qtbot, getattr(settings, box), typed)
    assert refused(settings, key) == (
        f"{said} would be ignored: workload azure-conv replays a trace, whose rows give each request's arrival time "
        "and token counts; set it back to preset's (the box's lowest value)")
    assert not taken(window)
    choose(settings, settings.workload, "chat")
    assert refused(settings, key) == "" and taken(window)


@pytest.mark.parametrize("key, box, typed, said", [
    ("prompt_median", "prompt_median", "100", "Prompt length 100 tokens"),
    ("shared_prefix_fraction", "shared_prefix", "50", "Shared prefix 50 %"),
])
def test_what_chat_text_gives_is_refused_beside_it(window, qtbot, key, box, typed, said):
    settings = window.settings
    choose(settings, settings.workload, "chat-text")
    enter(qtbot, getattr(settings, box), typed)
    assert refused(settings, key).startswith(
        f"{said} would be ignored: workload chat-text sends chat text, whose messages are the prompts")
    # back to preset's, typed as its name (since the seventeenth pass "-1", the shared prefix's marker, is refused)
    enter(qtbot, getattr(settings, box), getattr(settings, box).specialValueText())
    assert refused(settings, key) == "" and taken(window)
    enter(qtbot, settings.output_median, "100")  # the chat's answers are still drawn at this length
    assert taken(window) and window.settings_form.current_config().workload.output_tokens.median == 100


# -- 2. more requests than a trace has rows -----------------------------------------------------------------

def test_more_requests_than_the_azure_trace_has_rows_are_refused_at_requests(window, qtbot):
    settings = window.settings
    choose(settings, settings.workload, "azure-conv")
    enter(qtbot, settings.num_requests, "19367")  # ran the trace's 19,366 and said "completed 19,366"
    assert refused(settings, "num_requests") == (
        "Requests 19,367: workload azure-conv's trace holds 19,366 requests (one a row); give at most 19,366")
    assert not taken(window)
    enter(qtbot, settings.num_requests, "19366")
    assert refused(settings, "num_requests") == "" and taken(window)


def test_more_requests_than_a_picked_trace_has_rows_are_refused_and_the_trace_kept(window, qtbot, tmp_path,
                                                                                   monkeypatch):
    trace = tmp_path / "three.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "2023-11-16 18:15:00.0,10,10\n" * 3)
    settings = window.settings
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(trace), ""))
    settings.open_trace.click()
    assert settings.trace_path == str(trace)  # picked; the 2,000 requests asked are what is refused
    said = refused(settings, "num_requests")
    assert said.startswith("Requests 2,000: trace ") and said.endswith("three.csv holds 3 requests (one a row); "
                                                                      "give at most 3")
    enter(qtbot, settings.num_requests, "3")
    assert settings.trace_path == str(trace) and taken(window)


# -- 3. a shared prefix no request can hold, or longer than its prompts -------------------------------------

def test_a_shared_prefix_as_long_as_the_context_is_refused_and_a_longer_context_takes_it(window, qtbot):
    settings = window.settings
    enter(qtbot, settings.max_model_len, "256")
    enter(qtbot, settings.shared_prefix, "50")  # the 512-token prefix fitted no request: none was shared
    assert refused(settings, "shared_prefix_fraction") == (
        "Shared prefix 50 %: its system prompt of 512 tokens is not shorter than max_model_len 256 tokens, so no "
        "request could hold it; give a longer context length, or set Shared prefix back to preset's")
    enter(qtbot, settings.max_model_len, "1024")
    assert taken(window) and window.settings_form.current_config().workload.shared_prefix_fraction == 0.5


def test_a_shared_prefix_longer_than_the_prompt_length_is_refused(window, qtbot):
    settings = window.settings
    enter(qtbot, settings.prompt_median, "10")
    enter(qtbot, settings.shared_prefix, "100")  # every prompt ran at 513 tokens, not ~10
    assert refused(settings, "shared_prefix_fraction").startswith(
        "Shared prefix 100 %: its system prompt of 512 tokens is not shorter than the Prompt length, 10 tokens")
    assert "would grow to 513 tokens" in refused(settings, "shared_prefix_fraction")
    enter(qtbot, settings.prompt_median, "600")
    assert taken(window)


def test_a_prompt_length_below_a_presets_own_prefix_is_refused_at_the_prompt_length(window, qtbot):
    settings = window.settings
    choose(settings, settings.workload, "shared-system-prompt")
    enter(qtbot, settings.prompt_median, "500")
    assert refused(settings, "prompt_median").startswith(
        "Prompt length 500 tokens: workload shared-system-prompt's shared prefix of 1,024 tokens is not shorter")
    enter(qtbot, settings.prompt_median, "2000")
    assert taken(window)


# -- 4. the model editor's fields a model does not read, or cannot change ---------------------------------

def test_kv_heads_of_a_model_with_latent_attention_are_refused_at_the_box(window, qtbot):
    settings, editor = window.settings, window.editor
    choose(settings, settings.model, "deepseek-v2-lite")
    enter(qtbot, editor.model_boxes["num_key_value_heads"], "2")  # taken: KV per token stayed 30.38 KiB
    assert not editor.model_error.isHidden() and editor.model_error.text() == (
        "num_key_value_heads 2: deepseek-v2-lite uses multi-head latent attention, which caches one latent vector "
        "a token and layer (512 + 64 numbers), not K/V heads; give 16 back")
    assert not taken(window)
    enter(qtbot, editor.model_boxes["num_key_value_heads"], "16")
    assert taken(window)
    choose(settings, settings.model, "llama-3-8b")
    enter(qtbot, editor.model_boxes["num_key_value_heads"], "4")
    assert taken(window) and window.settings_form.current_config().model.num_key_value_heads == 4


def test_layers_of_a_model_that_names_each_layers_attention_are_refused_with_a_way_out(window, qtbot):
    settings, editor = window.settings, window.editor
    choose(settings, settings.model, "gemma-2-9b")
    enter(qtbot, editor.model_boxes["num_hidden_layers"], "5")
    said = editor.model_error.text()
    assert said.startswith("num_hidden_layers 5: gemma-2-9b names each of its 42 layers' attention (21 ")
    assert said.endswith("give 42 back, or open a config.json whose layer_types list that many")
    assert "give one of full_attention" not in said and not taken(window)
    choose(settings, settings.model, "llama-3-8b")
    enter(qtbot, editor.model_boxes["num_hidden_layers"], "40")
    assert taken(window) and window.settings_form.current_config().model.num_hidden_layers == 40


def test_save_model_as_refuses_what_the_editor_refuses_and_saves_a_shape_it_takes(window, qtbot, monkeypatch):
    said = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: said.append((title, text)))
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("mine", True))
    settings, editor = window.settings, window.editor
    choose(settings, settings.model, "deepseek-v2-lite")
    enter(qtbot, editor.model_boxes["num_key_value_heads"], "2")
    editor.save_model.click()  # saved: a preset whose 2 KV heads nothing reads
    assert said == [("Preset not saved", editor.model_error.text())] and user_preset_names("models") == []
    choose(settings, settings.model, "llama-3-8b")
    enter(qtbot, editor.model_boxes["num_key_value_heads"], "4")
    editor.save_model.click()
    assert len(said) == 1 and user_preset_names("models") == ["mine"]


def kv_formula(settings) -> tuple[str, str]:
    return re.search(r"KV per token</td><td align='right'><b>(.*?)</b></td><td><small>(.*?)</small>",
                     settings.preview.text()).groups()


def test_the_memory_math_multiplies_what_kv_per_token_counts(window):
    settings = window.settings
    choose(settings, settings.model, "deepseek-v2-lite")
    assert kv_formula(settings) == ("30.38 KiB", "27 layers x (512 + 64) latent x 2 B (bf16)")
    choose(settings, settings.hardware, "8x-h100-80gb")
    choose(settings, settings.model, "qwen3-next-80b-a3b")  # its 36 linear-attention layers cache no token
    assert kv_formula(settings)[1] == "2 x 12 layers (of 48) x 2 KV heads x 256 x 2 B (bf16)"
    choose(settings, settings.model, "llama-3-8b")
    assert kv_formula(settings) == ("128.00 KiB", "2 x 32 layers x 8 KV heads x 128 x 2 B (bf16)")


# -- 5. fields greyed where the run never reads them ------------------------------------------------------

def test_the_hardware_and_its_boxes_are_greyed_on_the_real_backend_with_why(window):
    settings, editor = window.settings, window.editor
    settings.backend.setCurrentIndex(settings.backend.findData("real"))
    assert not settings.hardware.isEnabled() and not editor.memory_gib.isEnabled()
    assert "not used now: the real backend runs on this machine" in settings.hardware.toolTip()
    assert "not used now: the real backend runs on this machine" in editor.gpu_count.toolTip()
    settings.backend.setCurrentIndex(settings.backend.findData("simulated"))
    assert settings.hardware.isEnabled() and editor.memory_gib.isEnabled() and editor.flops.isEnabled()
    assert "not used now" not in settings.hardware.toolTip() and taken(window)


def test_prefix_caching_is_greyed_with_contiguous_allocation(window):
    settings = window.settings
    settings.allocation.setCurrentIndex(settings.allocation.findData("contiguous"))
    box = settings.enable_prefix_caching
    assert not box.isEnabled() and "not used now: contiguous allocation reserves each request" in box.toolTip()
    settings.allocation.setCurrentIndex(settings.allocation.findData("paged"))
    assert box.isEnabled() and box.isChecked() and taken(window)


def test_the_seed_is_greyed_where_a_trace_sharing_no_prefix_runs_the_same_whatever_it_is(window, qtbot):
    settings, seed = window.settings, window.seed
    choose(settings, settings.workload, "azure-conv")  # seeds 0 to 5 were six runs of one result
    assert not seed.isEnabled()
    assert "not used now: workload azure-conv replays a trace" in seed.toolTip()
    enter(qtbot, settings.shared_prefix, "50")  # a prefix's token ids are drawn by the seed
    assert seed.isEnabled() and "not used now" not in seed.toolTip()
    choose(settings, settings.workload, "chat")
    assert seed.isEnabled() and taken(window)


def test_memory_utilisation_is_greyed_while_a_kv_pool_size_is_given(window, qtbot):
    settings = window.settings
    box = settings.gpu_memory_utilization
    enter(qtbot, settings.kv_budget, "1024")  # 0.05 and 1.00 built the same 512 blocks
    assert not box.isEnabled() and "not used now: a KV pool size is given" in box.toolTip()
    enter(qtbot, settings.kv_budget, "0")  # default: the pool is the share again
    assert box.isEnabled() and "not used now" not in box.toolTip() and taken(window)


def weights_row(settings) -> tuple[str, str]:
    return re.search(r"weights</td><td align='right'><b>(.*?)</b></td><td><small>(.*?)</small>",
                     settings.preview.text()).groups()


def test_a_shape_edit_scales_a_stated_checkpoint_size_and_a_saved_preset_keeps_the_scaled_size(
        window, qtbot, monkeypatch):
    from kvscope.app.lab.presets import load_model

    settings, editor = window.settings, window.editor
    choose(settings, settings.model, "qwen3.6-27b-fp8")
    assert weights_row(settings)[0].startswith("27.00 GiB")
    enter(qtbot, editor.model_boxes["hidden_size"], "4096")  # it still weighed the stated ~27 GiB
    size, source = weights_row(settings)
    assert size.startswith("21.60 GiB") and source.endswith("scaled to the edited shape's parameters "
                                                            "(24.35 B to 19.48 B parameters)")
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("narrow", True))
    editor.save_model.click()
    assert load_model("narrow").weights_bytes == window.settings_form.current_config().model.weights_bytes
    choose(settings, settings.model, "llama-3-8b")  # a size computed from the shape follows it as before
    enter(qtbot, editor.model_boxes["hidden_size"], "8192")
    assert weights_row(settings)[1] == "16.06 B parameters x 2 B (bf16)"


def test_a_kv_pool_size_past_the_devices_memory_is_refused_and_the_most_it_holds_is_taken(window, qtbot):
    settings = window.settings
    enter(qtbot, settings.kv_budget, "307200")  # 300 GiB on an 80 GB H100 was drawn and run as 300 GiB of blocks
    assert refused(settings, "kv_cache_memory_bytes") == (
        "KV pool size 300.00 GiB (322.1 GB): beside 14.96 GiB (16.1 GB) of llama-3-8b weights it is more than the "
        "79.19 GiB (85.0 GB) of h100-80gb; give at most 65,773 MiB, or more memory")
    enter(qtbot, settings.kv_budget, "65774")
    assert "give at most 65,773 MiB" in refused(settings, "kv_cache_memory_bytes") and not taken(window)
    enter(qtbot, settings.kv_budget, "65773")
    assert refused(settings, "kv_cache_memory_bytes") == "" and taken(window)


def test_a_model_the_devices_cannot_split_is_refused_at_devices_not_at_its_heads(window, qtbot):
    settings, editor = window.settings, window.editor
    choose(settings, settings.hardware, "8x-h100-80gb")
    choose(settings, settings.model, "qwen2.5-7b")
    # it said "tensor_parallel_size 8 cannot split num_attention_heads 28", a field this window has not,
    # and marked the Attention heads box
    assert editor.model_error.text() == (
        "gpu_count 8 (Devices): the run splits qwen2.5-7b over every device, and 8 cannot split its 28 query heads "
        "and 4 KV heads evenly; give 4 (the most that splits them), or other hardware")
    assert editor.gpu_count.styleSheet() and not editor.model_boxes["num_attention_heads"].styleSheet()
    assert window.settings_form.refusal[1] is editor.gpu_count and not taken(window)
    enter(qtbot, editor.gpu_count, "4")
    assert taken(window) and editor.model_error.isHidden()


def test_weights_are_greyed_on_the_real_backend_on_a_cpu_and_refused_past_16_bits_on_cuda(window, qtbot,
                                                                                          monkeypatch):
    from kvscope.app.gui import run_settings

    settings, editor = window.settings, window.editor
    choose(settings, settings.model, "tiny-llama")
    settings.backend.setCurrentIndex(settings.backend.findData("real"))
    monkeypatch.setattr(run_settings, "_real_runs_on_cuda", lambda: False)
    editor.weight_dtype.setCurrentText("int4")  # ran fp32 weights: random ones, as an edit, even of a folder's
    assert not editor.weight_dtype.isEnabled()
    assert "not used now: the real backend on this machine's CPU loads weights in fp32" in editor.weight_dtype.toolTip()
    config = window.settings_form.current_config()
    assert config is not None and config.model.name == "tiny-llama"  # not "tiny-llama (edited)"
    monkeypatch.setattr(run_settings, "_real_runs_on_cuda", lambda: True)
    window.settings_form.changed()
    assert editor.weight_dtype.isEnabled() and not taken(window)
    assert editor.model_error.text().startswith("weight_dtype int4 (Weights): the real backend loads weights at "
                                                "bf16 or fp16 on CUDA")
    assert window.settings_form.refusal[1] is editor.weight_dtype
    editor.weight_dtype.setCurrentText("fp16")
    assert taken(window) and window.settings_form.current_config().model.weight_dtype == "fp16"


def test_a_block_size_the_run_raises_says_so_beside_the_blocks(window):
    settings = window.settings
    choose(settings, settings.hardware, "8x-h100-80gb")
    choose(settings, settings.model, "qwen3-next-80b-a3b")  # 16 chosen, 144 beside it, unexplained
    assert "144 tokens, 13.50 MiB each (Block size 16 raised so that one block's page holds a linear-attention " \
           "layer's state, as vLLM does)" in settings.preview.text()
    choose(settings, settings.model, "llama-3-8b")
    assert "16 tokens, 2.00 MiB each</small>" in settings.preview.text()
