#pragma once
// A file model's real training data (the session's data block with a format): arrays read from
// npy, npz, torch.save or CSV files, held in memory, drawn in batches through LibTorch's data
// loader (torch::data: a dataset, a sampler that orders each epoch by the seed, worker threads
// that prefetch). Batch i depends only on the files, the seed and i, in whatever order batches
// are asked for, so two runs, two benchmark modes and a resumed run see the same batches.
//   FileDataSource data(session.data, session.loss, session.model.classes);
//   Batch b = data.batch(0);

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "symtune/core/session.h"
#include "symtune/data/array_files.h"
#include "symtune/data/data_source.h"

namespace symtune {

class FileDataSource final : public DataSource {
 public:
  // Reads and checks the files before any batch: a missing file or array, arrays whose sample
  // counts differ, a target the loss cannot take (a label outside the classes, a fraction where
  // a class index belongs), bad lengths. Throws DataError, one line naming the file.
  // `batchSize` 0: data.batch_size.
  FileDataSource(const DataSpec& data, const LossSpec& loss, int64_t classes,
                 int64_t batchSize = 0);
  ~FileDataSource() override;

  Batch batch(int64_t index) override;
  int64_t batchSize() const override;

  int64_t trainingSamples() const;
  int64_t validationSamples() const;
  int64_t batchesPerEpoch() const;
  // The held-out samples in batches of batchSize() (the last may be short), always in one order.
  std::vector<Batch> validationBatches() const;
  // "tagger.npz: 180 training samples (20 held out), inputs tokens [40] int64, lengths int64;
  // target tags [40] int64"
  const std::string& description() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace symtune
