// The legacy DLPack ABI (dlpack.h v0.6-0.8: DLManagedTensor in a "dltensor" capsule), which is
// what torch 1.13 through 2.8 import. Only the parts gpufeed produces are declared; layouts and
// codes are fixed by the DLPack spec (see shared/notes/cuda-driver-dlpack.md section 4).
#pragma once

#include <cstdint>

namespace gpufeed::python {

enum DLDeviceType : int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
};

enum DLDataTypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLBfloat = 4,
};

struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; given explicitly for old importers
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

static_assert(sizeof(DLTensor) == 48 && sizeof(DLManagedTensor) == 64,
              "DLPack layout differs from the ABI");

}  // namespace gpufeed::python
