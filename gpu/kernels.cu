// SPDX-License-Identifier: MIT
// Reduction kernels on the GPU: dst[i] = op(dst[i], src[i]), the semantics
// of collectives/reduce.h (checked bit for bit against it by
// tests/gpu/test_gpu_dev.c).
#include <errno.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#include "gpu/gpu.h"
}

namespace {

// Element types as their storage, with exact widening to f32 and
// round-to-nearest-even narrowing (what the CPU reference does; overflow
// gives inf, NaN stays NaN).
struct f32_t {
	typedef float S;
	static __device__ __forceinline__ float wide(S x) { return x; }
	static __device__ __forceinline__ S narrow(float x) { return x; }
};
struct f64_t {
	typedef double S;
	static __device__ __forceinline__ double wide(S x) { return x; }
	static __device__ __forceinline__ S narrow(double x) { return x; }
};
struct f16_t {
	typedef __half S;
	static __device__ __forceinline__ float wide(S x)
	{
		return __half2float(x);
	}
	static __device__ __forceinline__ S narrow(float x)
	{
		return __float2half_rn(x);
	}
};
struct bf16_t {
	typedef __nv_bfloat16 S;
	static __device__ __forceinline__ float wide(S x)
	{
		return __bfloat162float(x);
	}
	static __device__ __forceinline__ S narrow(float x)
	{
		return __float2bfloat16_rn(x);
	}
};

// Operators on the widened values. min/max: NaN if either operand is NaN
// (@a's when @a is one), @b when they compare equal (reduce_impl.h).
struct op_sum {
	template <class W>
	static __device__ __forceinline__ W f(W a, W b) { return a + b; }
};
struct op_prod {
	template <class W>
	static __device__ __forceinline__ W f(W a, W b) { return a * b; }
};
struct op_min {
	template <class W>
	static __device__ __forceinline__ W f(W a, W b)
	{
		return a != a ? a : (a < b ? a : b);
	}
};
struct op_max {
	template <class W>
	static __device__ __forceinline__ W f(W a, W b)
	{
		return a != a ? a : (a > b ? a : b);
	}
};

template <class T, class Op>
__device__ __forceinline__ typename T::S elem(typename T::S a,
					      typename T::S b)
{
	return T::narrow(Op::f(T::wide(a), T::wide(b)));
}

// 16-byte vectors: one load and one store per operand per thread and step.
template <class T, class Op>
__global__ void k_vec(uint4 *dst, const uint4 *src, size_t nvec)
{
	typedef typename T::S S;
	const unsigned per = sizeof(uint4) / sizeof(S);
	size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (; i < nvec; i += stride) {
		uint4 a = dst[i], b = src[i];
		S *pa = reinterpret_cast<S *>(&a);
		const S *pb = reinterpret_cast<const S *>(&b);

#pragma unroll
		for (unsigned k = 0; k < per; k++)
			pa[k] = elem<T, Op>(pa[k], pb[k]);
		dst[i] = a;
	}
}

// Any alignment (element-aligned), and the tails of the vector path.
template <class T, class Op>
__global__ void k_scalar(typename T::S *dst, const typename T::S *src,
			 size_t n)
{
	size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (; i < n; i += stride)
		dst[i] = elem<T, Op>(dst[i], src[i]);
}

const unsigned k_threads = 256;

unsigned grid_for(size_t n)
{
	static int sms;

	if (!sms) {
		int dev = 0, v = 0;

		if (cudaGetDevice(&dev) != cudaSuccess ||
		    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount,
					   dev) != cudaSuccess || v <= 0)
			v = 16;
		sms = v;
	}
	size_t want = (n + k_threads - 1) / k_threads;
	size_t cap = (size_t)sms * 16;

	return (unsigned)(want < cap ? (want ? want : 1) : cap);
}

template <class T, class Op>
int launch(void *dst, const void *src, size_t count, cudaStream_t s)
{
	typedef typename T::S S;
	const size_t per = sizeof(uint4) / sizeof(S);
	S *d = static_cast<S *>(dst);
	const S *a = static_cast<const S *>(src);
	size_t done = 0;

	if ((((uintptr_t)d | (uintptr_t)a) % sizeof(uint4)) == 0) {
		size_t nvec = count / per;

		if (nvec)
			k_vec<T, Op><<<grid_for(nvec), k_threads, 0, s>>>(
				reinterpret_cast<uint4 *>(d),
				reinterpret_cast<const uint4 *>(a), nvec);
		done = nvec * per;
	}
	if (count > done)
		k_scalar<T, Op><<<grid_for(count - done), k_threads, 0, s>>>(
			d + done, a + done, count - done);
	return cudaPeekAtLastError() == cudaSuccess ? 0 : -EIO;
}

template <class T>
int by_op(void *dst, const void *src, size_t count, enum cs_redop op,
	  cudaStream_t s)
{
	switch (op) {
	case CS_SUM:
		return launch<T, op_sum>(dst, src, count, s);
	case CS_PROD:
		return launch<T, op_prod>(dst, src, count, s);
	case CS_MIN:
		return launch<T, op_min>(dst, src, count, s);
	case CS_MAX:
		return launch<T, op_max>(dst, src, count, s);
	default:
		return -EINVAL;
	}
}

} // namespace

extern "C" int cs_gpu_reduce(void *dst, const void *src, size_t count,
			     enum cs_dtype t, enum cs_redop op, void *stream)
{
	cudaStream_t s = static_cast<cudaStream_t>(stream);
	size_t esz = cs_dtype_size(t);

	if ((unsigned)op >= CS_REDOP_COUNT || !esz)
		return -EINVAL;
	if (!count)
		return 0;
	if (!dst || !src || (uintptr_t)dst % esz || (uintptr_t)src % esz)
		return -EINVAL;
	switch (t) {
	case CS_F32:
		return by_op<f32_t>(dst, src, count, op, s);
	case CS_F64:
		return by_op<f64_t>(dst, src, count, op, s);
	case CS_F16:
		return by_op<f16_t>(dst, src, count, op, s);
	case CS_BF16:
		return by_op<bf16_t>(dst, src, count, op, s);
	default:
		return -EOPNOTSUPP;
	}
}
