"""The chained-layer case of the traffic model (the rest of the guide's D2), in closed form: from
the within-layer aliasing case, the x of every layer after the first stops crossing twice (into
rms_gemms_rope and as o_ffn's residual) and the out of every layer but the last stops coming back."""
from llamanb.model.config import PRESETS
from llamanb.npu import traffic


def test_chained_layers_drop_the_layer_to_layer_activations():
    for name in ("llama3.2-1b", "smollm2-135m"):
        cfg = PRESETS[name]
        for S in (64, 2048):
            for static in (False, True):
                a = traffic.prefill_bytes(cfg, S, aliasing=True, static_luts=static)
                c = traffic.prefill_bytes(cfg, S, chain_layers=True, static_luts=static)
                act = 2 * S * cfg.hidden                          # one bf16 [S, H] activation
                assert a["to_device"] - c["to_device"] == (cfg.n_layers - 1) * 2 * act
                assert a["from_device"] - c["from_device"] == (cfg.n_layers - 1) * act
