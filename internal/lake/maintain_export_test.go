package lake

// SetBeforeCompactCommit lets tests land a commit between a compaction's
// rewrite and its commit.
func SetBeforeCompactCommit(o *MaintainOptions, f func(round int)) { o.beforeCompactCommit = f }
