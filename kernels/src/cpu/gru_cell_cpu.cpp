// CPU implementation of symtune::gru_cell and its backward: rows in one parallel loop, each row
// one vectorized pass (at::vec) over its H columns that reads the six gate values and the state
// and writes the output — or, backward, recomputes r, z and n and writes the three gradients.
// Rows the mask does not keep copy the state forward and pass the gradient to it backward.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cpu/vec/vec.h>

#include "../gru_cell_common.h"
#include "../parallel.h"
#include "cpu_kernels.h"
#include "vec_math.h"

namespace symtune::kernels::CPU_CAPABILITY {

namespace {

template <typename T>
using Vec = at::vec::Vectorized<T>;

template <typename T>
inline Vec<T> sigmoidVec(Vec<T> x) {
  return Vec<T>(T(1)) / (Vec<T>(T(1)) + vecExp<T>(x.neg()));
}

// tanh(x) = 1 - 2 / (exp(2x) + 1): one exp, saturating to ±1 where exp over- or underflows.
template <typename T>
inline Vec<T> tanhVec(Vec<T> x) {
  const Vec<T> one(T(1));
  return one - Vec<T>(T(2)) / (vecExp<T>(x + x) + one);
}

// The gates at columns [j, j + count) of one row.
template <typename T>
struct Gates {
  Vec<T> r, z, n, hiddenN, state;
};

template <typename T>
inline Gates<T> gatesAt(const T* in, const T* hid, const T* state, int64_t H, int64_t j,
                        int64_t count) {
  const auto load = [count](const T* p) {
    return count == Vec<T>::size() ? Vec<T>::loadu(p) : Vec<T>::loadu(p, count);
  };
  Gates<T> g;
  g.r = sigmoidVec<T>(load(in + j) + load(hid + j));
  g.z = sigmoidVec<T>(load(in + H + j) + load(hid + H + j));
  g.hiddenN = load(hid + 2 * H + j);
  g.n = tanhVec<T>(load(in + 2 * H + j) + g.r * g.hiddenN);
  g.state = load(state + j);
  return g;
}

template <typename T>
inline void store(Vec<T> v, T* p, int64_t count) {
  if (count == Vec<T>::size())
    v.store(p);
  else
    v.store(p, static_cast<int>(count));
}

// Calls f(j, count) over [0, H) in vectors, the last one partial.
template <typename F>
inline void overColumns(int64_t H, int64_t width, const F& f) {
  int64_t j = 0;
  for (; j + width <= H; j += width)
    f(j, width);
  if (j < H)
    f(j, H - j);
}

template <typename T>
void forwardRows(const at::Tensor& in, const at::Tensor& hid, const at::Tensor& state,
                 const bool* keep, at::Tensor& out, int64_t B, int64_t H) {
  const T* inData = in.const_data_ptr<T>();
  const T* hidData = hid.const_data_ptr<T>();
  const T* stateData = state.const_data_ptr<T>();
  T* outData = out.data_ptr<T>();
  const int64_t inStride = in.stride(0), hidStride = hid.stride(0), stateStride = state.stride(0);
  at::parallel_for(0, B, rowGrain(3 * H), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const T* s = stateData + b * stateStride;
      T* o = outData + b * H;
      if (keep != nullptr && !keep[b]) {
        std::copy(s, s + H, o);
        continue;
      }
      const T* i = inData + b * inStride;
      const T* h = hidData + b * hidStride;
      overColumns(H, Vec<T>::size(), [&](int64_t j, int64_t count) {
        const Gates<T> g = gatesAt<T>(i, h, s, H, j, count);
        store<T>((Vec<T>(T(1)) - g.z) * g.n + g.z * g.state, o + j, count);
      });
    }
  });
}

template <typename T>
void backwardRows(const at::Tensor& grad, const at::Tensor& in, const at::Tensor& hid,
                  const at::Tensor& state, const bool* keep, at::Tensor& gradIn,
                  at::Tensor& gradHid, at::Tensor& gradState, int64_t B, int64_t H) {
  const T* gradData = grad.const_data_ptr<T>();
  const T* inData = in.const_data_ptr<T>();
  const T* hidData = hid.const_data_ptr<T>();
  const T* stateData = state.const_data_ptr<T>();
  T* gInData = gradIn.data_ptr<T>();
  T* gHidData = gradHid.data_ptr<T>();
  T* gStateData = gradState.data_ptr<T>();
  const int64_t gradStride = grad.stride(0), inStride = in.stride(0), hidStride = hid.stride(0),
                stateStride = state.stride(0);
  at::parallel_for(0, B, rowGrain(3 * H), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const T* g = gradData + b * gradStride;
      T* gi = gInData + b * 3 * H;
      T* gh = gHidData + b * 3 * H;
      T* gs = gStateData + b * H;
      if (keep != nullptr && !keep[b]) {
        std::fill(gi, gi + 3 * H, T(0));
        std::fill(gh, gh + 3 * H, T(0));
        std::copy(g, g + H, gs);
        continue;
      }
      const T* i = inData + b * inStride;
      const T* h = hidData + b * hidStride;
      const T* s = stateData + b * stateStride;
      overColumns(H, Vec<T>::size(), [&](int64_t j, int64_t count) {
        const Gates<T> x = gatesAt<T>(i, h, s, H, j, count);
        const Vec<T> one(T(1));
        const Vec<T> dOut =
            count == Vec<T>::size() ? Vec<T>::loadu(g + j) : Vec<T>::loadu(g + j, count);
        // step = (1 - z) n + z state
        const Vec<T> dz = dOut * (x.state - x.n) * x.z * (one - x.z);
        const Vec<T> dn = dOut * (one - x.z) * (one - x.n * x.n);  // through tanh
        const Vec<T> dr = dn * x.hiddenN * x.r * (one - x.r);      // through sigmoid
        store<T>(dr, gi + j, count);
        store<T>(dr, gh + j, count);
        store<T>(dz, gi + H + j, count);
        store<T>(dz, gh + H + j, count);
        store<T>(dn, gi + 2 * H + j, count);
        store<T>(dn * x.r, gh + 2 * H + j, count);
        store<T>(dOut * x.z, gs + j, count);
      });
    }
  });
}

const bool* keepData(const std::optional<at::Tensor>& keep, at::Tensor& holder) {
  if (!keep.has_value() || !keep->defined())
    return nullptr;
  holder = keep->reshape({-1}).contiguous();
  return holder.const_data_ptr<bool>();
}

}  // namespace

at::Tensor gruCellForwardCpu(const at::Tensor& gatesIn, const at::Tensor& gatesHidden,
                             const at::Tensor& hidden, const std::optional<at::Tensor>& keep) {
  const GruCellShape shape = gruCellShape(gatesIn, gatesHidden, hidden, keep);
  const at::Tensor in = rowsContiguous(gatesIn), hid = rowsContiguous(gatesHidden),
                   state = rowsContiguous(hidden);
  at::Tensor keepHolder;
  const bool* kept = keepData(keep, keepHolder);
  at::Tensor out = at::empty({shape.rows, shape.hidden}, hidden.options());
  AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "gru_cell_forward", [&] {
    forwardRows<scalar_t>(in, hid, state, kept, out, shape.rows, shape.hidden);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gruCellBackwardCpu(
    const at::Tensor& grad, const at::Tensor& gatesIn, const at::Tensor& gatesHidden,
    const at::Tensor& hidden, const std::optional<at::Tensor>& keep) {
  const GruCellShape shape = gruCellShape(gatesIn, gatesHidden, hidden, keep);
  TORCH_CHECK(grad.dim() == 2 && grad.size(0) == shape.rows && grad.size(1) == shape.hidden &&
                  grad.scalar_type() == hidden.scalar_type(),
              "symtune::gru_cell_backward: the gradient must be ", hidden.scalar_type(), " ",
              hidden.sizes(), ", got ", grad.scalar_type(), " ", grad.sizes());
  const at::Tensor g = rowsContiguous(grad), in = rowsContiguous(gatesIn),
                   hid = rowsContiguous(gatesHidden), state = rowsContiguous(hidden);
  at::Tensor keepHolder;
  const bool* kept = keepData(keep, keepHolder);
  at::Tensor gradIn = at::empty({shape.rows, 3 * shape.hidden}, hidden.options());
  at::Tensor gradHid = at::empty({shape.rows, 3 * shape.hidden}, hidden.options());
  at::Tensor gradState = at::empty({shape.rows, shape.hidden}, hidden.options());
  AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "gru_cell_backward", [&] {
    backwardRows<scalar_t>(g, in, hid, state, kept, gradIn, gradHid, gradState, shape.rows,
                           shape.hidden);
  });
  return {gradIn, gradHid, gradState};
}

}  // namespace symtune::kernels::CPU_CAPABILITY
