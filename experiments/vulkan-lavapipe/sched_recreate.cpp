// Decodes on one context with a scheduler reserve between them (llama_set_embeddings_layer_inp sets
// sched_need_reserve), every layer offloaded. No RidgeFill call: before the series' "context : keep the
// scheduler when reserving again" this crashed on lavapipe in the second decode. NO_RESERVE=1 skips the setter.
#include "llama.h"
#include "llama-ext.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [ROUNDS]\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 99;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    auto cp = llama_context_default_params();
    cp.n_ctx = 512; cp.n_batch = 128; cp.n_ubatch = 32; cp.n_threads = 2;
    llama_context * ctx = llama_init_from_model(model, cp);
    std::vector<llama_token> toks(100);
    for (int i = 0; i < 100; ++i) toks[i] = 100 + i;
    const int rounds = argc > 2 ? atoi(argv[2]) : 4;
    for (int r = 0; r < rounds; ++r) {
        llama_memory_seq_rm(llama_get_memory(ctx), 0, -1, -1);
        if (r > 0 && !getenv("NO_RESERVE")) {
            llama_set_embeddings_layer_inp(ctx, 1, r % 2);
        }
        const int rc = llama_decode(ctx, llama_batch_get_one(toks.data(), (int) toks.size()));
        printf("round %d rc %d logit0 %f\n", r, rc, llama_get_logits_ith(ctx, -1)[0]);
    }
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
