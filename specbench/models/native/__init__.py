"""Native transformers-5 classes for the diffusion LMs the seed methods decode (LLaDA, Dream,
MDLM), written here so the hub checkpoints load with no remote code.

Each class reads its checkpoint's own `config.json` and safetensors unchanged (same parameter
names, same config keys, the `model_type` the hub files carry) and registers that model type
with `AutoConfig` / `AutoModel` at import. Every forward takes the same arguments, so the
adapters in `specbench.models.diffusion` drive the three families alike:

    model(input_ids [B, Q],
          attention_mask=None | bool [B or 1, 1, Q, P + Q]   (True: the query may read the key),
          position_ids=None | long [B or 1, Q]               (None: P .. P + Q - 1),
          past_key_values=None | per-layer (k, v), each [B, kv_heads, P, head_dim],
          use_cache=False)
    -> .logits [B, Q, V] in the model's dtype, .past_key_values covering P + Q positions
       when use_cache.
"""

from specbench.models.native import dream, llada, mdlm  # noqa: F401  (registrations)
