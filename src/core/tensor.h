// TensorView: a non-owning (pointer, shape, dtype) triple. Row-major, contiguous.
// Kernels take raw pointers plus dims (llm.c style); views name and shape them for the
// parameter table, fixtures and checkpoints.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace strata {

struct Shape {
  std::vector<int64_t> dims;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims(d) {}
  explicit Shape(std::vector<int64_t> d) : dims(std::move(d)) {}

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  int64_t operator[](int64_t i) const { return dims[static_cast<size_t>(i)]; }
  bool operator==(const Shape& o) const { return dims == o.dims; }
  std::string to_string() const;  // "(3, 64, 64)"
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;

  int64_t numel() const { return shape.numel(); }
  int64_t bytes() const { return numel() * dtype_size(dtype); }
  float* f32() const {
    STRATA_CHECK(dtype == DType::f32);
    return static_cast<float*>(data);
  }
  bf16_t* bf16() const {
    STRATA_CHECK(dtype == DType::bf16);
    return static_cast<bf16_t*>(data);
  }
};

inline std::string Shape::to_string() const {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); i++) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + ")";
}

}  // namespace strata
