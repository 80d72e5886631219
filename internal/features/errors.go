// Package features runs retrain's two-stage feature backfill against the
// lake: stage 1 joins a feature group onto a training table's keys into a
// staging table, stats profiles staged columns, stage 2 promotes staged
// columns into the training table bucket by bucket in one commit. The
// pure parts (alignment, join, checks) are package backfill; this package
// reads and writes tables.
package features

import (
	"errors"
	"fmt"
)

// BadInputError is an error in what a job was asked to do (a missing
// table, a key column of the wrong type, an empty date range). Retrying
// cannot fix it; every such error is found before anything is written.
type BadInputError struct{ Err error }

func (e *BadInputError) Error() string { return e.Err.Error() }
func (e *BadInputError) Unwrap() error { return e.Err }

// badInput wraps a formatted error as a BadInputError.
func badInput(format string, args ...any) error {
	return &BadInputError{Err: fmt.Errorf(format, args...)}
}

// IsBadInput reports whether err is (or wraps) a BadInputError.
func IsBadInput(err error) bool {
	var b *BadInputError
	return errors.As(err, &b)
}

// CheckFailedError is a data check that failed (a feature whose null rate
// is over its threshold): the data will not change on retry.
type CheckFailedError struct{ Err error }

func (e *CheckFailedError) Error() string { return e.Err.Error() }
func (e *CheckFailedError) Unwrap() error { return e.Err }

// IsCheckFailed reports whether err is (or wraps) a CheckFailedError.
func IsCheckFailed(err error) bool {
	var c *CheckFailedError
	return errors.As(err, &c)
}
