// Shared by every kernel source: element types, conversions and the convolution parameters.
// One source for NVRTC and hipRTC; no headers, so neither compiler needs an SDK include path.
// FARM_DTYPE selects the storage type: 0 fp32, 1 fp16, 2 bf16 (16-bit values live in u16).
#pragma once

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#define FARM_HIP 1
#endif

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#ifndef FARM_DTYPE
#define FARM_DTYPE 2
#endif

#if FARM_DTYPE == 0
typedef float elem_t;
#else
typedef u16 elem_t;
#endif

__device__ __forceinline__ float bf16_to_float(u16 v) { return __uint_as_float(((u32)v) << 16); }

__device__ __forceinline__ u16 float_to_bf16(float f) {
  u32 bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (u16)((bits >> 16) | 0x40u);  // keep NaN a NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);                                        // nearest even
  return (u16)(bits >> 16);
}

__device__ __forceinline__ float half_to_float(u16 v) {
#ifdef FARM_HIP
  _Float16 h = __builtin_bit_cast(_Float16, v);
  return (float)h;
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
  return f;
#endif
}

__device__ __forceinline__ u16 float_to_half(float f) {
#ifdef FARM_HIP
  _Float16 h = (_Float16)f;
  return __builtin_bit_cast(u16, h);
#else
  u16 v;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f));
  return v;
#endif
}

__device__ __forceinline__ float to_float(elem_t v) {
#if FARM_DTYPE == 0
  return v;
#elif FARM_DTYPE == 1
  return half_to_float(v);
#else
  return bf16_to_float(v);
#endif
}

__device__ __forceinline__ elem_t from_float(float f) {
#if FARM_DTYPE == 0
  return f;
#elif FARM_DTYPE == 1
  return float_to_half(f);
#else
  return float_to_bf16(f);
#endif
}

// A grouped 2D convolution, channels-last: input NHWGC, weight GKYXC, output NHWGK.
// Passed by value as every convolution kernel's last argument (18 x int32, see kernels/conv).
struct ConvParams {
  int N, C, K, G, H, W, R, S, P, Q;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int Cg, Kg;  // channels per group
};
