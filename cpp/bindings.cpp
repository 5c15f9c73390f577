// ridgefill._core: a thin pybind11 layer over the patched libllama.
//
// Everything that can abort inside llama.cpp (GGML_ASSERT) is validated here first and
// turned into a Python exception; decode calls run with the GIL released.

#include "ggml-backend.h"
#include "llama.h"
#include "llama-ext.h"
#include "llama-rf.h"
#include "llama-rf-ext.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------------------
// logging: keep llama.cpp quiet, but remember its recent warnings/errors so an
// exception can say why a load or decode failed.

std::mutex              g_log_mutex;
std::deque<std::string> g_log_tail;
int                     g_log_level = GGML_LOG_LEVEL_ERROR;  // echo to stderr at or above this

void log_callback(ggml_log_level level, const char * text, void * /*user*/) {
    if (level == GGML_LOG_LEVEL_CONT || text == nullptr) {
        return;
    }
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (level >= GGML_LOG_LEVEL_WARN) {
        g_log_tail.emplace_back(text);
        while (g_log_tail.size() > 8) {
            g_log_tail.pop_front();
        }
    }
    if (level >= g_log_level) {
        fputs(text, stderr);
    }
}

std::string take_log_tail() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    std::string out;
    for (auto & line : g_log_tail) {
        out += line;
    }
    g_log_tail.clear();
    return out;
}

void clear_log_tail() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_tail.clear();
}

ggml_type parse_cache_type(const std::string & name) {
    static const std::vector<std::pair<std::string, ggml_type>> types = {
        {"f32", GGML_TYPE_F32},   {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16},
        {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1},
        {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1},
    };
    for (auto & [n, t] : types) {
        if (n == name) {
            return t;
        }
    }
    throw py::value_error("unknown KV cache type '" + name + "' (use f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1)");
}

llama_rf_mode parse_rf_mode(const std::string & v) {
    llama_rf_mode mode;
    if (!llama_rf_mode_from_name(v.c_str(), &mode)) {
        throw py::value_error("fill mode must be 'exact', 'identity' or 'ridge', not '" + v + "'");
    }
    return mode;
}

llama_rf_part parse_rf_part(const std::string & v) {
    if (v == "k")    return LLAMA_RF_PART_K;
    if (v == "v")    return LLAMA_RF_PART_V;
    if (v == "conv") return LLAMA_RF_PART_CONV;
    if (v == "ssm")  return LLAMA_RF_PART_SSM;
    throw py::value_error("state part must be 'k', 'v', 'conv' or 'ssm', not '" + v + "'");
}

bool is_recurrent(llama_rf_part p) { return p == LLAMA_RF_PART_CONV || p == LLAMA_RF_PART_SSM; }

llama_flash_attn_type parse_flash_attn(const std::string & v) {
    if (v == "auto") return LLAMA_FLASH_ATTN_TYPE_AUTO;
    if (v == "on")   return LLAMA_FLASH_ATTN_TYPE_ENABLED;
    if (v == "off")  return LLAMA_FLASH_ATTN_TYPE_DISABLED;
    throw py::value_error("flash_attn must be 'auto', 'on' or 'off', not '" + v + "'");
}

using i32_array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using f32_array = py::array_t<float, py::array::c_style>;

// ---------------------------------------------------------------------------

// Register rpc-servers (host:port) as devices of every model loaded afterwards, as llama-bench -rpc does;
// their layers (maps included) are then placed there with n_gpu_layers. Registered once per process.
void add_rpc_servers(const std::vector<std::string> & endpoints) {
    static std::vector<std::string> added;
    ggml_backend_reg_t rpc_reg = ggml_backend_reg_by_name("RPC");
    if (rpc_reg == nullptr) {
        throw std::runtime_error("this build has no RPC backend (GGML_RPC)");
    }
    using add_server_fn = ggml_backend_reg_t (*)(const char * endpoint);
    auto * add_server = (add_server_fn) ggml_backend_reg_get_proc_address(rpc_reg, "ggml_backend_rpc_add_server");
    if (add_server == nullptr) {
        throw std::runtime_error("the RPC backend has no ggml_backend_rpc_add_server");
    }
    for (const auto & ep : endpoints) {
        if (std::find(added.begin(), added.end(), ep) != added.end()) {
            continue;
        }
        ggml_backend_reg_t reg = add_server(ep.c_str());
        if (reg == nullptr) {
            throw py::value_error("cannot use rpc-server " + ep);
        }
        ggml_backend_register(reg);
        added.push_back(ep);
    }
}

class Model {
  public:
    Model(const std::string & path, int n_gpu_layers, bool use_mmap, bool vocab_only, const std::string & maps)
        : path_(path), maps_(maps) {
        for (const std::string & file : { path, maps }) {
            FILE * f = file.empty() ? nullptr : std::fopen(file.c_str(), "rb");
            if (f == nullptr && !file.empty()) {
                throw py::value_error("cannot open " + std::string(&file == &path ? "model" : "maps") + " file: " + file);
            }
            if (f) {
                std::fclose(f);
            }
        }

        llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = n_gpu_layers;
        mp.vocab_only   = vocab_only;
        mp.load_mode    = use_mmap ? mp.load_mode : LLAMA_LOAD_MODE_NONE;
        mp.rf_maps      = maps_.empty() ? nullptr : maps_.c_str();

        clear_log_tail();
        {
            py::gil_scoped_release nogil;
            model_ = llama_model_load_from_file(path.c_str(), mp);
        }
        if (model_ == nullptr) {
            throw std::runtime_error("failed to load model from " + path + "\n" + take_log_tail());
        }
        vocab_ = llama_model_get_vocab(model_);
        load_warnings_ = take_log_tail();
    }

    ~Model() { llama_model_free(model_); }

    Model(const Model &) = delete;
    Model & operator=(const Model &) = delete;

    llama_model *       get() const { return model_; }
    const llama_vocab * vocab() const { return vocab_; }
    const std::string & path() const { return path_; }
    const std::string & maps() const { return maps_; }
    const std::string & load_warnings() const { return load_warnings_; }

    int n_layer() const { return llama_model_n_layer(model_); }
    int n_embd() const { return llama_model_n_embd(model_); }
    int n_head() const { return llama_model_n_head(model_); }
    int n_head_kv() const { return llama_model_n_head_kv(model_); }
    int n_ctx_train() const { return llama_model_n_ctx_train(model_); }
    int n_vocab() const { return llama_vocab_n_tokens(vocab_); }
    uint64_t n_params() const { return llama_model_n_params(model_); }
    uint64_t size() const { return llama_model_size(model_); }
    int bos() const { return llama_vocab_bos(vocab_); }
    int eos() const { return llama_vocab_eos(vocab_); }
    bool add_bos() const { return llama_vocab_get_add_bos(vocab_); }
    int rf_split_layer() const { return llama_rf_model_split_layer(model_); }
    int rf_sink_rows() const { return llama_rf_model_sink_rows(model_); }
    bool rf_has_route() const { return llama_rf_model_has_route(model_); }
    float rf_route_fraction() const { return llama_rf_model_route_fraction(model_); }
    int rf_tail_rows() const { return llama_rf_model_tail_rows(model_); }

    std::string desc() const {
        char buf[256];
        llama_model_desc(model_, buf, sizeof(buf));
        return buf;
    }

    py::dict metadata() const {
        py::dict out;
        const int n = llama_model_meta_count(model_);
        std::vector<char> key(512), val(1 << 16);
        for (int i = 0; i < n; ++i) {
            if (llama_model_meta_key_by_index(model_, i, key.data(), key.size()) < 0) {
                continue;
            }
            if (llama_model_meta_val_str_by_index(model_, i, val.data(), val.size()) < 0) {
                continue;
            }
            out[py::str(key.data())] = py::str(val.data());
        }
        return out;
    }

    py::array_t<int32_t> tokenize(const std::string & text, bool add_special, bool parse_special) const {
        int32_t n = -llama_tokenize(vocab_, text.data(), (int32_t) text.size(), nullptr, 0, add_special, parse_special);
        if (n == INT32_MIN || n < 0) {
            throw std::runtime_error("tokenization overflow");
        }
        py::array_t<int32_t> out(n);
        if (n > 0) {
            int32_t got = llama_tokenize(vocab_, text.data(), (int32_t) text.size(), out.mutable_data(), n, add_special, parse_special);
            if (got != n) {
                throw std::runtime_error("tokenization size changed between calls");
            }
        }
        return out;
    }

    void check_tokens(const int32_t * toks, size_t n) const {
        const int32_t nv = n_vocab();
        for (size_t i = 0; i < n; ++i) {
            if (toks[i] < 0 || toks[i] >= nv) {
                throw py::value_error("token id " + std::to_string(toks[i]) + " at index " + std::to_string(i) +
                                      " is out of range [0, " + std::to_string(nv) + ")");
            }
        }
    }

    py::bytes detokenize_bytes(const i32_array & tokens, bool special) const {
        check_tokens(tokens.data(), tokens.size());
        std::string buf(tokens.size() * 8 + 16, '\0');
        int32_t n = llama_detokenize(vocab_, tokens.data(), (int32_t) tokens.size(), buf.data(), (int32_t) buf.size(), false, special);
        if (n < 0) {
            buf.resize(-n);
            n = llama_detokenize(vocab_, tokens.data(), (int32_t) tokens.size(), buf.data(), (int32_t) buf.size(), false, special);
        }
        buf.resize(std::max(n, 0));
        return py::bytes(buf);
    }

    py::bytes token_piece(int32_t token, bool special) const {
        check_tokens(&token, 1);
        char buf[256];
        int32_t n = llama_token_to_piece(vocab_, token, buf, sizeof(buf), 0, special);
        if (n < 0) {
            throw std::runtime_error("token piece too long");
        }
        return py::bytes(buf, n);
    }

  private:
    std::string         path_;
    std::string         maps_;
    std::string         load_warnings_;  // what llama.cpp warned about while loading
    llama_model *       model_ = nullptr;
    const llama_vocab * vocab_ = nullptr;
};

// ---------------------------------------------------------------------------

class Context {
  public:
    Context(std::shared_ptr<Model> model, uint32_t n_ctx, uint32_t n_batch, uint32_t n_ubatch, int n_threads,
            const std::string & flash_attn, const std::string & type_k, const std::string & type_v,
            const std::vector<int> & capture_layers, uint32_t n_seq_max, bool swa_full)
        : model_(std::move(model)) {
        if (n_ctx == 0 || n_batch == 0 || n_ubatch == 0) {
            throw py::value_error("n_ctx, n_batch and n_ubatch must be positive");
        }
        if (n_ubatch > n_batch) {
            throw py::value_error("n_ubatch must not exceed n_batch");
        }
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx           = n_ctx;
        cp.n_batch         = n_batch;
        cp.n_ubatch        = n_ubatch;
        cp.n_seq_max       = n_seq_max;
        cp.swa_full        = swa_full;
        cp.n_threads       = n_threads;
        cp.n_threads_batch = n_threads;
        cp.flash_attn_type = parse_flash_attn(flash_attn);
        cp.type_k          = parse_cache_type(type_k);
        cp.type_v          = parse_cache_type(type_v);
        cp.no_perf         = false;

        for (int il : capture_layers) {
            check_capture_layer(il);
        }

        clear_log_tail();
        ctx_ = llama_init_from_model(model_->get(), cp);
        if (ctx_ == nullptr) {
            throw std::runtime_error("failed to create context\n" + take_log_tail());
        }
        for (int il : capture_layers) {
            llama_set_embeddings_layer_inp(ctx_, (uint32_t) il, true);
            captured_.push_back(il);
        }
        batch_ = llama_batch_init((int32_t) n_batch, 0, 1);
    }

    ~Context() {
        llama_batch_free(batch_);
        llama_free(ctx_);
    }

    Context(const Context &) = delete;
    Context & operator=(const Context &) = delete;

    uint32_t n_ctx() const { return llama_n_ctx(ctx_); }
    uint32_t n_batch() const { return llama_n_batch(ctx_); }
    uint32_t n_ubatch() const { return llama_n_ubatch(ctx_); }
    const std::vector<int> & capture_layers() const { return captured_; }
    std::shared_ptr<Model> model() const { return model_; }

    // One llama_decode call. `outputs` marks the rows whose logits are kept.
    void decode(const i32_array & tokens, int32_t pos0, int32_t seq_id, py::object outputs) {
        const size_t n = tokens.size();
        if (n == 0) {
            throw py::value_error("decode needs at least one token");
        }
        if (n > n_batch()) {
            throw py::value_error("decode got " + std::to_string(n) + " tokens, more than n_batch=" + std::to_string(n_batch()) +
                                  "; split the prompt into chunks");
        }
        if (pos0 < 0 || (size_t) pos0 + n > n_ctx()) {
            throw py::value_error("positions [" + std::to_string(pos0) + ", " + std::to_string(pos0 + n) +
                                  ") do not fit the context (n_ctx=" + std::to_string(n_ctx()) + ")");
        }
        if (seq_id < 0) {
            throw py::value_error("seq_id must be >= 0");
        }
        model_->check_tokens(tokens.data(), n);
        std::vector<int8_t> want = output_mask(outputs, n);

        batch_.n_tokens = (int32_t) n;
        for (size_t i = 0; i < n; ++i) {
            batch_.token[i]     = tokens.data()[i];
            batch_.pos[i]       = pos0 + (int32_t) i;
            batch_.n_seq_id[i]  = 1;
            batch_.seq_id[i][0] = seq_id;
            batch_.logits[i]    = want[i];
        }
        output_rows_.clear();
        for (size_t i = 0; i < n; ++i) {
            if (want[i]) {
                output_rows_.push_back((int32_t) i);
            }
        }
        n_outputs_ = (int) output_rows_.size();

        clear_log_tail();
        int32_t rc;
        {
            py::gil_scoped_release nogil;
            rc = llama_decode(ctx_, batch_);
            llama_synchronize(ctx_);
        }
        if (rc != 0) {
            n_outputs_ = 0;
            last_n_tokens_ = 0;
            std::string why = rc == 1 ? "no KV cache slot for the batch (context full?)" :
                              rc == 2 ? "decode aborted" : "decode failed (rc=" + std::to_string(rc) + ")";
            throw std::runtime_error(why + "\n" + take_log_tail());
        }
        last_n_tokens_ = n;
    }

    // logits of the last decode's outputs, shape (n_outputs, n_vocab), in row order
    // (llama_get_logits_ith takes the row's index in the batch, not its output index)
    py::array_t<float> logits() const {
        const int nv = model_->n_vocab();
        py::array_t<float> out({(py::ssize_t) n_outputs_, (py::ssize_t) nv});
        for (int i = 0; i < n_outputs_; ++i) {
            const float * row = llama_get_logits_ith(ctx_, output_rows_[i]);
            if (row == nullptr) {
                throw std::runtime_error("no logits for output " + std::to_string(i));
            }
            std::memcpy(out.mutable_data(i, 0), row, sizeof(float) * nv);
        }
        return out;
    }

    // log p(targets[i]) under output i of the last decode (log-softmax in float64)
    py::array_t<double> token_logprobs(const i32_array & targets) const {
        if ((int) targets.size() != n_outputs_) {
            throw py::value_error("need one target per output row: got " + std::to_string(targets.size()) + " targets for " +
                                  std::to_string(n_outputs_) + " outputs");
        }
        model_->check_tokens(targets.data(), targets.size());
        const int nv = model_->n_vocab();
        py::array_t<double> out(n_outputs_);
        for (int i = 0; i < n_outputs_; ++i) {
            const float * row = llama_get_logits_ith(ctx_, output_rows_[i]);
            const float mx = *std::max_element(row, row + nv);
            double sum = 0.0;
            for (int j = 0; j < nv; ++j) {
                sum += std::exp((double) row[j] - mx);
            }
            out.mutable_data()[i] = (double) row[targets.data()[i]] - mx - std::log(sum);
        }
        return out;
    }

    // residual-stream input of layer `il` for every row of the last decode, (n_tokens, n_embd)
    py::array_t<float> layer_input(int il, py::object out) const {
        if (std::find(captured_.begin(), captured_.end(), il) == captured_.end()) {
            throw py::value_error("layer " + std::to_string(il) + " is not captured by this context");
        }
        if (last_n_tokens_ == 0) {
            throw std::runtime_error("no decode has run yet");
        }
        const size_t d = model_->n_embd();
        f32_array dst;
        if (out.is_none()) {
            dst = f32_array({(py::ssize_t) last_n_tokens_, (py::ssize_t) d});
        } else {
            dst = py::cast<f32_array>(out);
            if (dst.ndim() != 2 || (size_t) dst.shape(0) != last_n_tokens_ || (size_t) dst.shape(1) != d || !dst.writeable()) {
                throw py::value_error("out must be a writable C-contiguous float32 array of shape (" +
                                      std::to_string(last_n_tokens_) + ", " + std::to_string(d) + ")");
            }
        }
        const float * src = llama_get_embeddings_layer_inp(ctx_, (uint32_t) il);
        std::memcpy(dst.mutable_data(), src, sizeof(float) * last_n_tokens_ * d);
        return dst;
    }

    // split prefill: mode and split layer (-1 = the model's ridgefill.split_layer)
    void set_fill(const std::string & mode, int32_t split) {
        clear_log_tail();
        if (llama_rf_set_mode(ctx_, parse_rf_mode(mode), split) != 0) {
            std::string why = take_log_tail();
            throw py::value_error("cannot use fill mode '" + mode + "': " + (why.empty() ? "rejected by llama.cpp" : why));
        }
    }

    std::string fill_mode() const { return llama_rf_mode_name(llama_rf_get_mode(ctx_)); }

    int32_t fill_split() const { return llama_rf_get_split(ctx_); }

    // routed rows: the share p in [0, 1] of each fill ubatch that runs the late layers in full
    void set_route(float p) {
        clear_log_tail();
        if (llama_rf_set_route(ctx_, p) != 0) {
            std::string why = take_log_tail();
            throw py::value_error("cannot route " + std::to_string(p) + " of the filled rows: " +
                                  (why.empty() ? "rejected by llama.cpp" : why));
        }
    }

    float route() const { return llama_rf_get_route(ctx_); }

    int64_t routed_count() const { return llama_rf_get_counts(ctx_, -1).n_routed; }

    // selected rows: the share q in [0, 1] of a prompt's filled rows that its last n_probe rows select
    void set_select(float q, int32_t n_probe) {
        clear_log_tail();
        if (llama_rf_set_select(ctx_, q, n_probe) != 0) {
            std::string why = take_log_tail();
            throw py::value_error("cannot select " + std::to_string(q) + " of the filled rows with a probe of " +
                                  std::to_string(n_probe) + " rows: " + (why.empty() ? "rejected by llama.cpp" : why));
        }
    }

    float select() const { return llama_rf_get_select(ctx_); }

    int32_t probe() const { return llama_rf_get_probe(ctx_); }

    int64_t selected_count() const { return llama_rf_get_counts(ctx_, -1).n_selected; }

    // the last probe's scores over its sequence's positions, and the positions it selected
    f32_array select_scores() const {
        const int32_t n = llama_rf_select_scores(ctx_, nullptr, 0);
        f32_array out(n);
        llama_rf_select_scores(ctx_, out.mutable_data(), n);
        return out;
    }

    py::array_t<int32_t> selected_rows() const {
        const int32_t n = llama_rf_select_rows(ctx_, nullptr, 0);
        py::array_t<int32_t> out(n);
        llama_rf_select_rows(ctx_, out.mutable_data(), n);
        return out;
    }

    void set_fill_range(int32_t seq_id, int32_t p0, int32_t p1) {
        if (llama_rf_set_range(ctx_, seq_id, p0, p1) != 0) {
            throw py::value_error("invalid fill range for seq_id " + std::to_string(seq_id));
        }
    }

    std::pair<int64_t, int64_t> fill_counts() const {
        const llama_rf_counts c = llama_rf_get_counts(ctx_, -1);
        return {c.n_filled, c.n_full};
    }

    void reset_fill_counts() { llama_rf_reset_counts(ctx_); }

    // cached K/V rows (positions [p0, p1)) or recurrent state of one layer, as float32 (n_rows, row_size)
    f32_array state_get(int32_t il, const std::string & part, int32_t seq_id, int32_t p0, int32_t p1) {
        const llama_rf_part pt = parse_rf_part(part);
        const int32_t width = row_size(il, pt, part);
        const int32_t n_max = is_recurrent(pt) ? 1 : std::max(0, (p1 < 0 ? (int32_t) llama_n_ctx(ctx_) : p1) - std::max(0, p0));
        std::vector<float> buf((size_t) n_max * width);
        clear_log_tail();
        const int32_t n = llama_rf_state_get(ctx_, il, seq_id, p0, p1, pt, buf.data(), buf.size());
        if (n < 0) {
            throw py::value_error("cannot read " + part + " of layer " + std::to_string(il) + ": " + take_log_tail());
        }
        f32_array out({(py::ssize_t) n, (py::ssize_t) width});
        std::memcpy(out.mutable_data(), buf.data(), sizeof(float) * (size_t) n * width);
        return out;
    }

    int32_t row_size(int32_t il, llama_rf_part pt, const std::string & part) {
        clear_log_tail();
        const int32_t width = llama_rf_state_row_size(ctx_, il, pt);
        if (width < 0) {
            throw py::value_error("layer " + std::to_string(il) + " has no '" + part + "' state: " + take_log_tail());
        }
        return width;
    }

    int32_t state_set(int32_t il, const std::string & part, int32_t seq_id, int32_t p0, int32_t p1,
                      const py::array_t<float, py::array::c_style | py::array::forcecast> & values) {
        const llama_rf_part pt = parse_rf_part(part);
        const int32_t width = row_size(il, pt, part);
        if (values.ndim() != 2 || values.shape(1) != width) {
            throw py::value_error("values must have shape (n_rows, " + std::to_string(width) + ")");
        }
        clear_log_tail();
        const int32_t n = llama_rf_state_set(ctx_, il, seq_id, p0, p1, pt, values.data(), (size_t) values.size());
        if (n < 0) {
            throw py::value_error("cannot write " + part + " of layer " + std::to_string(il) + ": " + take_log_tail());
        }
        return n;
    }

    void memory_clear() { llama_memory_clear(llama_get_memory(ctx_), true); }

    bool seq_rm(int32_t seq_id, int32_t p0, int32_t p1) { return llama_memory_seq_rm(llama_get_memory(ctx_), seq_id, p0, p1); }

    int32_t seq_pos_max(int32_t seq_id) const { return llama_memory_seq_pos_max(llama_get_memory(ctx_), seq_id); }

    py::dict perf() const {
        const auto p = llama_perf_context(ctx_);
        py::dict d;
        d["t_load_ms"]   = p.t_load_ms;
        d["t_p_eval_ms"] = p.t_p_eval_ms;
        d["t_eval_ms"]   = p.t_eval_ms;
        d["n_p_eval"]    = p.n_p_eval;
        d["n_eval"]      = p.n_eval;
        d["n_reused"]    = p.n_reused;
        return d;
    }

    void perf_reset() { llama_perf_context_reset(ctx_); }

  private:
    void check_capture_layer(int il) const {
        // the input of layer n_layer is only materialised for output rows, so it is not offered
        if (il < 0 || il >= model_->n_layer()) {
            throw py::index_error("capture layer " + std::to_string(il) + " is out of range [0, " +
                                  std::to_string(model_->n_layer()) + ")");
        }
    }

    static std::vector<int8_t> output_mask(py::object outputs, size_t n) {
        std::vector<int8_t> want(n, 0);
        if (outputs.is_none()) {
            return want;
        }
        if (py::isinstance<py::str>(outputs)) {
            auto s = outputs.cast<std::string>();
            if (s == "last") {
                want[n - 1] = 1;
            } else if (s == "all") {
                std::fill(want.begin(), want.end(), 1);
            } else if (s != "none") {
                throw py::value_error("outputs must be 'none', 'last', 'all' or a boolean mask");
            }
            return want;
        }
        auto mask = py::cast<py::array_t<bool, py::array::c_style | py::array::forcecast>>(outputs);
        if ((size_t) mask.size() != n) {
            throw py::value_error("output mask has " + std::to_string(mask.size()) + " entries for " + std::to_string(n) + " tokens");
        }
        for (size_t i = 0; i < n; ++i) {
            want[i] = mask.data()[i] ? 1 : 0;
        }
        return want;
    }

    std::shared_ptr<Model> model_;
    llama_context *        ctx_ = nullptr;
    llama_batch            batch_{};
    std::vector<int>       captured_;
    std::vector<int32_t>   output_rows_;  // batch index of each output row of the last decode
    int                    n_outputs_     = 0;
    size_t                 last_n_tokens_ = 0;
};

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "RidgeFill bindings to the patched libllama";

    llama_log_set(log_callback, nullptr);
    llama_backend_init();

    m.def("version", [] { return std::string(llama_version()); }, "libllama version string (identifies the fork)");
    m.def("build_commit", [] { return std::string(RIDGEFILL_BUILD_COMMIT); },
          "the upstream commit and the series' hash the fork was built from (as the tools' --version prints it)");
    m.def("system_info", [] { return std::string(llama_print_system_info()); });
    m.def("rf_supported_archs", [] {
        std::vector<std::string> names;
        for (int32_t i = 0; i < llama_rf_n_archs(); ++i) {
            names.emplace_back(llama_rf_arch_name(i));
        }
        return names;
    }, "architectures the fork can fill and capture (llama_rf_arch_name)");
    m.def("set_log_level", [](int level) { g_log_level = level; },
          "echo llama.cpp log lines at or above this ggml level (1 debug .. 4 error, 5 silences)");

    m.def("devices", [] {
        std::vector<std::tuple<std::string, std::string, std::string>> out;
        for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
            ggml_backend_dev_t dev = ggml_backend_dev_get(i);
            const char * type = "accel";
            switch (ggml_backend_dev_type(dev)) {
                case GGML_BACKEND_DEVICE_TYPE_CPU:  type = "cpu";  break;
                case GGML_BACKEND_DEVICE_TYPE_GPU:  type = "gpu";  break;
                case GGML_BACKEND_DEVICE_TYPE_IGPU: type = "igpu"; break;
                default: break;
            }
            out.emplace_back(ggml_backend_dev_name(dev), ggml_backend_dev_description(dev), type);
        }
        return out;
    }, "the backend devices models load onto: (name, description, type: cpu, gpu, igpu or accel)");
    m.def("add_rpc_servers", &add_rpc_servers, py::arg("endpoints"),
          "register rpc-servers (host:port) as devices of the models loaded afterwards");

    py::class_<Model, std::shared_ptr<Model>>(m, "Model")
        .def(py::init<const std::string &, int, bool, bool, const std::string &>(), py::arg("path"),
             py::arg("n_gpu_layers") = -1, py::arg("use_mmap") = true, py::arg("vocab_only") = false,
             py::arg("maps") = "")
        .def_property_readonly("path", &Model::path)
        .def_property_readonly("maps", &Model::maps)
        .def_property_readonly("load_warnings", &Model::load_warnings)
        .def_property_readonly("n_layer", &Model::n_layer)
        .def_property_readonly("n_embd", &Model::n_embd)
        .def_property_readonly("n_head", &Model::n_head)
        .def_property_readonly("n_head_kv", &Model::n_head_kv)
        .def_property_readonly("n_ctx_train", &Model::n_ctx_train)
        .def_property_readonly("n_vocab", &Model::n_vocab)
        .def_property_readonly("n_params", &Model::n_params)
        .def_property_readonly("size", &Model::size)
        .def_property_readonly("bos", &Model::bos)
        .def_property_readonly("eos", &Model::eos)
        .def_property_readonly("add_bos", &Model::add_bos)
        .def_property_readonly("rf_split_layer", &Model::rf_split_layer)
        .def_property_readonly("rf_sink_rows", &Model::rf_sink_rows)
        .def_property_readonly("rf_has_route", &Model::rf_has_route)
        .def_property_readonly("rf_route_fraction", &Model::rf_route_fraction)
        .def_property_readonly("rf_tail_rows", &Model::rf_tail_rows)
        .def_property_readonly("desc", &Model::desc)
        .def("metadata", &Model::metadata)
        .def("tokenize", &Model::tokenize, py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false)
        .def("detokenize_bytes", &Model::detokenize_bytes, py::arg("tokens"), py::arg("special") = false)
        .def("token_piece", &Model::token_piece, py::arg("token"), py::arg("special") = false);

    py::class_<Context>(m, "Context")
        .def(py::init<std::shared_ptr<Model>, uint32_t, uint32_t, uint32_t, int, const std::string &, const std::string &,
                      const std::string &, const std::vector<int> &, uint32_t, bool>(),
             py::arg("model"), py::arg("n_ctx") = 4096, py::arg("n_batch") = 2048, py::arg("n_ubatch") = 512,
             py::arg("n_threads") = 2, py::arg("flash_attn") = "auto", py::arg("type_k") = "f16", py::arg("type_v") = "f16",
             py::arg("capture_layers") = std::vector<int>{}, py::arg("n_seq_max") = 1, py::arg("swa_full") = true)
        .def_property_readonly("n_ctx", &Context::n_ctx)
        .def_property_readonly("n_batch", &Context::n_batch)
        .def_property_readonly("n_ubatch", &Context::n_ubatch)
        .def_property_readonly("capture_layers", &Context::capture_layers)
        .def_property_readonly("model", &Context::model)
        .def("decode", &Context::decode, py::arg("tokens"), py::arg("pos0"), py::arg("seq_id") = 0, py::arg("outputs") = "last")
        .def("logits", &Context::logits)
        .def("token_logprobs", &Context::token_logprobs, py::arg("targets"))
        .def("layer_input", &Context::layer_input, py::arg("layer"), py::arg("out") = py::none())
        .def("set_fill", &Context::set_fill, py::arg("mode"), py::arg("split") = -1)
        .def_property_readonly("fill_mode", &Context::fill_mode)
        .def_property_readonly("fill_split", &Context::fill_split)
        .def("set_fill_range", &Context::set_fill_range, py::arg("seq_id"), py::arg("p0"), py::arg("p1"))
        .def("set_route", &Context::set_route, py::arg("p"))
        .def_property_readonly("route", &Context::route)
        .def_property_readonly("routed_count", &Context::routed_count)
        .def("set_select", &Context::set_select, py::arg("q"), py::arg("n_probe"))
        .def_property_readonly("select", &Context::select)
        .def_property_readonly("probe", &Context::probe)
        .def_property_readonly("selected_count", &Context::selected_count)
        .def("select_scores", &Context::select_scores)
        .def("selected_rows", &Context::selected_rows)
        .def("fill_counts", &Context::fill_counts)
        .def("reset_fill_counts", &Context::reset_fill_counts)
        .def("state_get", &Context::state_get, py::arg("layer"), py::arg("part"), py::arg("seq_id") = 0,
             py::arg("p0") = 0, py::arg("p1") = -1)
        .def("state_set", &Context::state_set, py::arg("layer"), py::arg("part"), py::arg("seq_id") = 0,
             py::arg("p0") = 0, py::arg("p1") = -1, py::arg("values"))
        .def("memory_clear", &Context::memory_clear)
        .def("seq_rm", &Context::seq_rm, py::arg("seq_id"), py::arg("p0") = -1, py::arg("p1") = -1)
        .def("seq_pos_max", &Context::seq_pos_max, py::arg("seq_id") = 0)
        .def("perf", &Context::perf)
        .def("perf_reset", &Context::perf_reset);
}
