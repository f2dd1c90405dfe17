// A short pass in one call (engine/weights/lean_step.py): each decoder layer a `NativeLayer`, the whole pass a
// `NativeModel` (below), with the same kernels and ops as the layer written out in Python (vnni_linear.cpp's linear,
// lean_ops.cpp's norms, RoPE, attention and SwiGLU), called from here. Why: on 2 cores a small model's one-token pass
// spends a quarter of its time between the kernels (Python calls, argument parsing, module lookups: ~0.2 ms a layer for
// the 0.5B, 24 layers a pass), which is most of what a draft token costs beyond streaming its weights. Same arithmetic
// in the same order: the logits are bitwise those of the Python layer (tests/test_engine_lean_layer.py).
#include <torch/extension.h>

#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

torch::Tensor linear(torch::Tensor x, torch::Tensor packed, torch::Tensor d, torch::Tensor m, int64_t N,
                     int64_t G, int64_t bits, bool per_channel, bool use_simd);
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor keys, torch::Tensor values, double scaling);
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps);
torch::Tensor add_rms_norm(torch::Tensor x, torch::Tensor delta, torch::Tensor weight, double eps);
torch::Tensor rope_into_cache(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor k_buf,
                              torch::Tensor v_buf, int64_t start, int64_t H, int64_t KV);
torch::Tensor silu_mul(torch::Tensor gate_up);

// One VnniLinear: its buffers (held, not copied) and shape.
struct Projection {
  torch::Tensor packed, d, m;
  c10::optional<torch::Tensor> bias;
  int64_t out_features, group, bits;
  bool per_channel, use_simd;

  torch::Tensor operator()(const torch::Tensor& x) const {
    auto out = linear(x, packed, d, m, out_features, group, bits, per_channel, use_simd);
    return bias ? out.add_(*bias) : out;
  }
};

// Several projections of one input side by side (q/k/v or gate/up that could not share one kernel call).
torch::Tensor project(const std::vector<Projection>& parts, const torch::Tensor& x) {
  if (parts.size() == 1) return parts[0](x);
  std::vector<torch::Tensor> outs;
  outs.reserve(parts.size());
  for (const auto& part : parts) outs.push_back(part(x));
  return at::cat(outs, -1);
}

struct NativeLayer {
  torch::Tensor attn_norm, mlp_norm;
  double attn_eps, mlp_eps;
  std::vector<Projection> qkv, o, gate_up, down;
  int64_t heads, kv_heads;
  double scaling;

  // x: the residual stream [n, hidden] (float32, updated in place: the previous layer's delta, then this layer's
  // attention output, are added to it); k_buf, v_buf: the layer's cache buffers with room for start + n rows.
  // Returns this layer's MLP output, for the next layer (or the final norm) to add.
  torch::Tensor step(torch::Tensor x, c10::optional<torch::Tensor> delta, torch::Tensor cos, torch::Tensor sin,
                     torch::Tensor k_buf, torch::Tensor v_buf, int64_t start) const {
    auto h = delta ? add_rms_norm(x, *delta, attn_norm, attn_eps) : rms_norm(x, attn_norm, attn_eps);
    auto q = rope_into_cache(project(qkv, h), cos, sin, k_buf, v_buf, start, heads, kv_heads);
    const int64_t end = start + x.size(0);
    auto attended = decode_attention(q, k_buf.narrow(2, 0, end), v_buf.narrow(2, 0, end), scaling);
    h = add_rms_norm(x, project(o, attended), mlp_norm, mlp_eps);
    return project(down, silu_mul(project(gate_up, h)));
  }
};

// A whole short pass in one call (engine/weights/lean_step.py, `NativeModel`): the embedding rows, every layer's step
// and the final norm. Why: between two layers the Python loop ran the cancel check, the cache's bookkeeping and the
// call's argument parsing, right after the layer had streamed its weights out of the caches (each touched Python object
// a miss), a measurable share of a draft step (docs/performance.md, "Levers measured and set aside"). The GIL is
// released while the layers run (the server's thread answers meanwhile) and taken back only to ask `cancelled` between
// two layers.
struct NativeModel {
  std::vector<NativeLayer> layers;
  torch::Tensor embed;  // [vocab, hidden] float32
  torch::Tensor final_norm;
  double final_eps;

  // ids: the pass's tokens at positions start..; cos, sin: RoPE's rows for them (lean_step.py's table); k_bufs and
  // v_bufs: each layer's cache buffers with room for start + n rows; cancelled: None or a callable asked before each
  // layer. Returns the final norm's rows [n, hidden] (none when `normed` is false) and how many layers ran: fewer than
  // all when cancelled() was true (those layers' keys and values are in the buffers, uncommitted).
  std::tuple<c10::optional<torch::Tensor>, int64_t> run(const std::vector<int64_t>& ids, int64_t start,
                                                        const torch::Tensor& cos, const torch::Tensor& sin,
                                                        const std::vector<torch::Tensor>& k_bufs,
                                                        const std::vector<torch::Tensor>& v_bufs, bool normed,
                                                        pybind11::object cancelled) const {
    namespace py = pybind11;
    const int64_t n = static_cast<int64_t>(ids.size()), vocab = embed.size(0), hidden = embed.size(1);
    const size_t count = layers.size();
    TORCH_CHECK(k_bufs.size() == count && v_bufs.size() == count, "one key and one value buffer per layer");
    for (int64_t id : ids) TORCH_CHECK(id >= 0 && id < vocab, "token id ", id, " is outside the vocabulary");
    const bool asks = !cancelled.is_none();
    py::gil_scoped_release released;
    auto x = torch::empty({n, hidden}, torch::kFloat32);
    const float* rows = embed.data_ptr<float>();
    float* xp = x.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) std::memcpy(xp + i * hidden, rows + ids[i] * hidden, hidden * sizeof(float));
    c10::optional<torch::Tensor> delta;
    for (size_t index = 0; index < count; ++index) {
      if (asks) {
        py::gil_scoped_acquire held;
        const int stop = PyObject_IsTrue(cancelled().ptr());
        if (stop < 0) throw py::error_already_set();
        if (stop) return {c10::nullopt, static_cast<int64_t>(index)};
      }
      delta = layers[index].step(x, delta, cos, sin, k_bufs[index], v_bufs[index], start);
    }
    if (!normed) return {c10::nullopt, static_cast<int64_t>(count)};
    return {add_rms_norm(x, *delta, final_norm, final_eps), static_cast<int64_t>(count)};
  }
};

void bind_lean_layer(pybind11::module& mod) {
  namespace py = pybind11;
  py::class_<Projection>(mod, "Projection", py::module_local())  // two builds may share a process
      .def(py::init([](torch::Tensor packed, torch::Tensor d, torch::Tensor m, c10::optional<torch::Tensor> bias,
                       int64_t out_features, int64_t group, int64_t bits, bool per_channel, bool use_simd) {
        return Projection{packed, d, m, bias, out_features, group, bits, per_channel, use_simd};
      }));
  py::class_<NativeLayer>(mod, "NativeLayer", py::module_local())
      .def(py::init([](torch::Tensor attn_norm, double attn_eps, torch::Tensor mlp_norm, double mlp_eps,
                       std::vector<Projection> qkv, std::vector<Projection> o, std::vector<Projection> gate_up,
                       std::vector<Projection> down, int64_t heads, int64_t kv_heads, double scaling) {
        return NativeLayer{attn_norm, mlp_norm, attn_eps, mlp_eps, std::move(qkv), std::move(o),
                           std::move(gate_up), std::move(down), heads, kv_heads, scaling};
      }));  // its step runs inside NativeModel::run
  py::class_<NativeModel>(mod, "NativeModel", py::module_local())
      .def(py::init([](std::vector<NativeLayer> layers, torch::Tensor embed, torch::Tensor final_norm,
                       double final_eps) {
        TORCH_CHECK(embed.dim() == 2 && embed.scalar_type() == torch::kFloat32 && embed.is_contiguous(),
                    "the embedding is a contiguous float32 matrix");
        TORCH_CHECK(!layers.empty(), "a model has at least one layer");
        return NativeModel{std::move(layers), embed, final_norm, final_eps};
      }))
      .def("run", &NativeModel::run, "a whole short pass: embedding, every layer, the final norm (see lean_layer.cpp)");
}
