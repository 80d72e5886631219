package features

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/lake"
)

// PropPromotionInputs is the snapshot summary property that identifies
// what a promotion promoted: the training table, the staging tables at
// their snapshots, the date range and column (promotionInputs).
const PropPromotionInputs = "retrain.promotion.inputs"

// promotionInputs digests what a promotion of spec reads from the staging
// tables, pinned at their snapshots: two promotions with the same digest
// write the same values into the same rows.
func promotionInputs(spec PromoteSpec, stagingSnapshots []int64) string {
	dateCol := spec.DateColumn
	if dateCol == "" {
		dateCol = "date"
	}
	b, _ := json.Marshal(struct {
		Training  string   `json:"training"`
		Staging   []string `json:"staging"`
		Snapshots []int64  `json:"snapshots"`
		Start     string   `json:"start"`
		End       string   `json:"end"`
		Date      string   `json:"date"`
	}{spec.Training, spec.Staging, stagingSnapshots, spec.StartDate, spec.EndDate, dateCol})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// alreadyPromoted reports the snapshot of main's head when it is exactly
// the promotion spec asks for: the same staging tables at the snapshots
// they have now, over the same range. Promoting again would commit a
// snapshot with the same content, which would make every run that reads
// the table miss the node cache; a promotion that finds its effect in
// place commits nothing and reports that snapshot instead. Only the head
// counts: a promotion with other commits on top is not in place as it was.
func alreadyPromoted(ctx context.Context, cat *lake.Catalog, training *table.Table, spec PromoteSpec) (snapshot int64, inputs string, ok bool, err error) {
	var snaps []int64
	for _, name := range spec.Staging {
		st, err := cat.Load(ctx, name)
		if err != nil {
			return 0, "", false, nil // checkPromotion reports it
		}
		var snap int64
		if s := st.CurrentSnapshot(); s != nil {
			snap = s.SnapshotID
		}
		snaps = append(snaps, snap)
	}
	inputs = promotionInputs(spec, snaps)
	head := training.CurrentSnapshot()
	if head == nil || head.Summary == nil {
		return 0, inputs, false, nil
	}
	got := head.Summary.Properties[PropPromotionInputs]
	if got == "" || !strings.EqualFold(got, inputs) {
		return 0, inputs, false, nil
	}
	return head.SnapshotID, inputs, true, nil
}
