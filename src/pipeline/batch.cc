// Batch: the consumer's handle on one delivered batch (declared in gpufeed/batch.h).
#include "gpufeed/error.h"
#include "pipeline/batch_parts.h"

namespace gpufeed {

Batch::Batch(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {
  schema_ = parts_->schema.get();
}

Batch::~Batch() {
  if (!parts_) return;
  if (parts_->consumer_stream_set && parts_->buffer) {
    // The consumer's kernels may still read this batch: reuse it only after them.
    try {
      parts_->buffer.ReleaseAfter(parts_->device->RecordOn(parts_->consumer_stream));
    } catch (...) {
      // Recording failed (driver shutting down); fall back to a host-side wait on the copy.
      if (ready_) {
        try {
          ready_->Wait();
        } catch (...) {
        }
      }
    }
  }
  parts_->buffer.Reset();
  parts_->held->fetch_sub(1);
}

FieldView Batch::field(int index) const {
  GPUFEED_ASSERT(index >= 0 && index < static_cast<int>(fields_.size()), "field index");
  const FieldSpec& spec = schema_->fields[static_cast<size_t>(index)];
  return FieldView{&spec, fields_[static_cast<size_t>(index)], rows_, parts_->device->id()};
}

FieldView Batch::field(std::string_view name) const {
  schema_->Field(name);  // throws naming the fields
  return field(schema_->IndexOf(name));
}

void Batch::WaitOn(uintptr_t stream) const {
  if (ready_) ready_->MakeStreamWait(stream);
  parts_->consumer_stream = stream;
  parts_->consumer_stream_set = true;
  // The stream may begin this step from here: time it (after the wait, so it counts).
  if (parts_->gpu_busy) parts_->gpu_busy->MarkStart(parts_->step, stream);
}

void Batch::Synchronize() const {
  if (ready_) ready_->Wait();
}

}  // namespace gpufeed
