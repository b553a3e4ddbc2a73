"""Runners execute a scheduled batch: the simulated one prices it with a roofline model on a
virtual clock; the real one (torch, transformers) runs the model over the paged KV pool."""

from kvscope.engine.runners.base import ExecuteResult, Runner

__all__ = ["ExecuteResult", "Runner"]
