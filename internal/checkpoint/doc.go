// Package checkpoint saves the intermediate data of a pipeline step as Parquet
// in object storage, so that a retried step reads its outputs back instead of
// recomputing them.
//
// A step runs inside [Do]. Do looks for a complete checkpoint of the step for
// the step's inputs fingerprint; if there is one, it returns the outputs that
// were recorded with it and does not run the step. Otherwise it runs the step
// with a [Writer], into which the step streams datasets of Go structs
// ([Create], [WriteAll]), and then commits the checkpoint by writing its
// manifest.
//
// # Layout
//
// A checkpoint of node N of run R of pipeline P, for inputs fingerprint F, is
//
//	checkpoints/P/R/N/F/manifest.json
//	checkpoints/P/R/N/F/<attempt>/<dataset>-00000.parquet
//	...
//
// The manifest is written last, with If-None-Match, so a checkpoint is
// complete exactly when its manifest exists, and only one attempt can ever
// complete it. Each attempt writes its files under its own attempt directory:
// an attempt that crashed, or one that is still running after its step was
// retried elsewhere, can neither make a checkpoint look complete nor change
// the files of the attempt that completed it. Files no manifest names are
// ignored, deleted by the attempt that commits, and swept by [GC].
//
// The manifest records, for each dataset, the Parquet schema, its columns
// in schema order ([Column]), the row count and each file's size, row count
// and CRC32C, plus the step's outputs. A
// [Reader] verifies all of them while streaming rows back.
//
// # Retention
//
// Checkpoints are short-lived. [SetRetention] asks the server to expire them
// with a lifecycle rule where it supports one; [GC] deletes checkpoints older
// than a given age itself, including incomplete ones.
package checkpoint
