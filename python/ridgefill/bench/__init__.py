"""Speed, measured side by side: TTFT of exact, identity and ridge prefill through the real
llama-bench and llama-server (`ttft`), the multiply-add cost model and its speed-up bound
(`costmodel`), where the layers go when a prefill is pipelined over several devices (`pipeline`),
reports and plots (`report`), synthetic real-size GGUFs (`synth`) and the GPU run of bench/gpu.sh
(`gpu`)."""
