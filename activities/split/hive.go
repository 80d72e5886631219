package split

import (
	"fmt"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/hivepath"
)

// folderDay is the date a file's <col>=YYYY-MM-DD folder says its rows
// have: ok false when the path has no such folder, an error naming the
// folder when its value is not a date.
func folderDay(name, col string) (backfill.Day, bool, error) {
	v, ok := hivepath.Value(hivepath.Parts(name), col)
	if !ok {
		return 0, false, nil
	}
	d, err := backfill.ParseDay(v)
	if err != nil {
		return 0, false, fmt.Errorf("%w: folder %s=%s/ of %s: the date column's folder value must be YYYY-MM-DD", errSplitInput, col, v, name)
	}
	return d, true, nil
}
