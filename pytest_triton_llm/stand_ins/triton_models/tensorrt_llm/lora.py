"""LoRA for the reference tensorrt_llm model, with TensorRT-LLM's request semantics.

- lora_weights [rows, size] + lora_config [rows, 3] (module id, layer, rank; the layout of
  hf_lora_convert.py, lora_B already scaled) register an adapter under lora_task_id;
- later requests may send lora_task_id alone; an id the cache does not hold is an error;
- the cache evicts the least recently used adapter when lora_cache_host_memory_bytes is full;
- every batch row may use a different adapter, or none: forward hooks on the target
  projections add x @ A^T @ B^T to the rows of each adapter.

`fault` (generation.py's) names the known upstream LoRA bug it reproduces, if any.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
from errors import ExecutorError
from served_contract import RequestError

# TensorRT-LLM module id -> (block, projection) in a llama-style Hugging Face model
MODULE_PATHS = {
    1: ("self_attn", "q_proj"),
    2: ("self_attn", "k_proj"),
    3: ("self_attn", "v_proj"),
    4: ("self_attn", "o_proj"),
    5: ("mlp", "gate_proj"),
    6: ("mlp", "down_proj"),
    7: ("mlp", "up_proj"),
}
MODULE_IDS = {
    "attn_qkv": 0,
    "attn_q": 1,
    "attn_k": 2,
    "attn_v": 3,
    "attn_dense": 4,
    "mlp_h_to_4h": 5,
    "mlp_4h_to_h": 6,
    "mlp_gate": 7,
}


@dataclass(eq=False)
class LoraAdapter:
    task_id: int
    weights: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]]  # (module id, layer) -> (A [r, in], B [out, r])

    @property
    def nbytes(self) -> int:
        return sum(a.numel() * a.element_size() + b.numel() * b.element_size() for a, b in self.weights.values())


class LoraSupport:
    def __init__(self, model, lora_config: dict, cache_bytes: int | None = None, fault=lambda name: False):
        self.fault = fault
        self.max_rank = lora_config["max_lora_rank"]
        unknown = [m for m in lora_config["lora_target_modules"] if m not in MODULE_IDS]
        if unknown:
            raise ValueError(f"unknown LoRA target modules {unknown}")
        self.targets = {MODULE_IDS[m] for m in lora_config["lora_target_modules"]}
        if 0 in self.targets:
            raise ValueError("attn_qkv (a fused qkv projection) does not exist in this model; target attn_q/k/v")
        self.cache_bytes = cache_bytes
        self.dtype, self.device = model.dtype, model.device
        self.layers = model.model.layers
        self._cache: OrderedDict[int, LoraAdapter] = OrderedDict()
        self._lock = threading.Lock()
        self.rows: list[LoraAdapter | None] = []  # the adapter of each batch row of the next forward
        for layer_index, layer in enumerate(self.layers):
            for module_id in self.targets:
                block, name = MODULE_PATHS[module_id]
                linear = getattr(getattr(layer, block), name)
                linear.register_forward_hook(self._hook(module_id, layer_index))

    def _hook(self, module_id: int, layer: int):
        def apply(module, args, output):
            rows = self.rows
            if not any(rows):
                return None
            if self.fault("lora_one_adapter_for_whole_batch") or self.fault("llmapi_adapter_leaks_onto_the_batch"):
                # the first adapter of the batch, on every row: the base model's rows too
                rows = [next(a for a in rows if a is not None)] * len(rows)
            x = args[0]
            for adapter in {id(a): a for a in rows if a is not None}.values():
                pair = adapter.weights.get((module_id, layer))
                if pair is None:
                    continue
                index = [i for i, a in enumerate(rows) if a is adapter]
                a, b = pair
                output[index] += (x[index] @ a.T) @ b.T
            return output

        return apply

    # -- the cache ---------------------------------------------------------------------------
    def resolve(self, task_id: int | None, weights: np.ndarray | None, config: np.ndarray | None) -> LoraAdapter | None:
        """The adapter a request asks for: registered from its weights, or looked up by its id."""
        if task_id is None and weights is None and config is None:
            return None
        if task_id is None:
            raise RequestError("lora_weights and lora_config need a lora_task_id to cache them under")
        if (weights is None) != (config is None):
            raise RequestError("lora_weights and lora_config must be sent together")
        with self._lock:
            if weights is None:
                adapter = self._cache.get(task_id)
                if adapter is None and self._cache and self.fault("lora_unknown_id_serves_another_adapter"):
                    adapter = next(reversed(self._cache.values()))  # the adapter used last, silently
                if adapter is None or self.fault("lora_task_id_alone_not_found"):
                    raise ExecutorError(f"LoRA task {task_id} not found in cache. Please send LoRA weights with request")
                self._cache.move_to_end(adapter.task_id)
                return adapter
            adapter = self.parse(task_id, weights, config)
            self._cache[task_id] = adapter
            self._cache.move_to_end(task_id)
            self._evict()
            return adapter

    def cached_task_ids(self) -> list[int]:
        with self._lock:
            return list(self._cache)

    def _evict(self) -> None:
        if self.cache_bytes is None:
            return
        while len(self._cache) > 1 and sum(a.nbytes for a in self._cache.values()) > self.cache_bytes:
            self._cache.popitem(last=False)  # the oldest adapter goes first, as in TensorRT-LLM

    def parse(self, task_id: int, weights: np.ndarray, config: np.ndarray) -> LoraAdapter:
        weights, config = np.asarray(weights), np.asarray(config)
        weights = weights.reshape(weights.shape[-2:]) if weights.ndim == 3 else weights
        config = config.reshape(config.shape[-2:]) if config.ndim == 3 else config
        if config.ndim != 2 or config.shape[1] != 3 or weights.ndim != 2 or weights.shape[0] != config.shape[0]:
            raise RequestError(
                f"lora_config must be [rows, 3] and lora_weights [rows, size] with the same rows; "
                f"got {list(config.shape)} and {list(weights.shape)}"
            )
        parsed = {}
        for row, (module_id, layer, rank) in zip(weights, config.tolist(), strict=True):
            if module_id not in self.targets:
                if self.fault("lora_unbuilt_module_silently_dropped"):  # the row is skipped, the rest serves
                    continue
                names = {v: k for k, v in MODULE_IDS.items()}
                raise RequestError(
                    f"LoRA module {names.get(module_id, module_id)} is not among the engine's lora_target_modules "
                    f"({', '.join(sorted(names[t] for t in self.targets))})"
                )
            if not 0 <= layer < len(self.layers):
                raise RequestError(f"LoRA layer {layer} does not exist (the model has {len(self.layers)})")
            if not 0 < rank <= self.max_rank:
                raise RequestError(f"LoRA rank {rank} is outside 1..{self.max_rank} (max_lora_rank of the engine)")
            block, name = MODULE_PATHS[module_id]
            linear = getattr(getattr(self.layers[layer], block), name)
            n_in, n_out = linear.in_features, linear.out_features
            need = rank * (n_in + n_out)
            if need > row.size:
                raise RequestError(f"LoRA row for layer {layer} module {module_id} holds {row.size} values, needs {need}")
            a = torch.from_numpy(np.ascontiguousarray(row[: rank * n_in]).astype(np.float32)).reshape(rank, n_in)
            b = torch.from_numpy(np.ascontiguousarray(row[rank * n_in : need]).astype(np.float32)).reshape(n_out, rank)
            parsed[(module_id, layer)] = (a.to(self.device, self.dtype), b.to(self.device, self.dtype))
        return LoraAdapter(task_id, parsed)
