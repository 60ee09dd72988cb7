#include <cmath>

#include "ops/cpu/kernels.hpp"

namespace loom::cpu {

// m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
// m_hat = m / (1 - b1^t);  v_hat = v / (1 - b2^t)
// p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p)      (decoupled weight decay, Loshchilov 2019)
void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, int64_t step) {
  float c1 = 1.f - std::pow(beta1, static_cast<float>(step));
  float c2 = 1.f - std::pow(beta2, static_cast<float>(step));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    float mi = beta1 * m[i] + (1.f - beta1) * g;
    float vi = beta2 * v[i] + (1.f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float update = (mi / c1) / (std::sqrt(vi / c2) + eps);
    param[i] -= lr * (update + weight_decay * param[i]);
  }
}

// Each tensor in turn: on the CPU one loop per tensor is what a fused launch would do.
void adamw_multi(int64_t count, float* const* params, const float* const* grads, float* const* m,
                 float* const* v, const int64_t* numel, const float* weight_decay, float lr,
                 float beta1, float beta2, float eps, int64_t step) {
  for (int64_t t = 0; t < count; ++t)
    adamw(params[t], grads[t], m[t], v[t], numel[t], lr, beta1, beta2, eps, weight_decay[t], step);
}

}  // namespace loom::cpu
