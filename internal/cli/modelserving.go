package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/serving"
	"github.com/retrain-ml/retrain/internal/webhook"
)

// ExitNotNotified is the exit status of a model command whose alias move
// is done but whose webhooks were not all told: the move stands.
const ExitNotNotified = 3

// envSecretsDir defaults --secrets-dir, as on a worker.
const envSecretsDir = "RETRAIN_SECRETS_DIR"

// servingFlags are the model commands' flags for telling serving.
type servingFlags struct {
	secretsDir string
}

func (f *servingFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.secretsDir, "secrets-dir", os.Getenv(envSecretsDir),
		"folder of files named after secrets: ${secret.NAME} in a model's webhooks reads "+webhook.SecretEnvPrefix+"NAME, else this folder's file NAME (env "+envSecretsDir+"); secrets are resolved here, by whoever sends")
}

func (f *servingFlags) notifier(reg *models.Registry) serving.Notifier {
	return serving.Notifier{
		Registry: reg,
		Sender:   webhook.Sender{},
		Secrets:  webhook.LocalSecrets(f.secretsDir, "--secrets-dir"),
		By:       cliActor(),
	}
}

// moveReport is what `model promote` and `rollback` print as JSON.
type moveReport struct {
	models.Move
	Changed bool `json:"changed"`
	// Serving is what the model's webhooks answered; absent when nothing
	// moved.
	Serving *serving.Outcome `json:"serving,omitempty"`
	// ServingError is why serving was not told, when it was not.
	ServingError string `json:"serving_error,omitempty"`
}

// announce tells the model's webhooks about m, a move this command made,
// prints the move and what serving heard, and fails with ExitNotNotified
// when a webhook was not told: the move itself stands.
func (f *servingFlags) announce(ctx context.Context, app *App, reg *models.Registry, m models.Move, asJSON bool) error {
	var o *serving.Outcome
	if m.Changed {
		out := f.notifier(reg).AfterMove(ctx, m, "")
		o = &out
	}
	if asJSON {
		r := moveReport{Move: m, Changed: m.Changed, Serving: o}
		if o != nil && o.Err != nil {
			r.ServingError = o.Err.Error()
		}
		if err := printJSON(app, r); err != nil {
			return err
		}
	} else if err := printMove(app, m, false); err != nil {
		return err
	}
	if o == nil {
		return nil
	}
	if !asJSON {
		printOutcome(app, m, *o)
	}
	if o.RecordErr != nil {
		fmt.Fprintf(app.Err, "warning: the deliveries are not in the alias history: %v\n", o.RecordErr)
	}
	if o.OK() {
		return nil
	}
	why := fmt.Sprintf("%d of %d webhooks failed", o.Failed, len(o.Deliveries))
	if o.Err != nil {
		why = o.Err.Error()
	}
	return &ExitError{Code: ExitNotNotified, Err: fmt.Errorf(
		"%s of %s moved to %s (move #%d) and stays there, but serving was not told: %s; once the webhooks answer, tell them again with: retrain model notify %s --alias %s",
		m.Alias, m.Model, m.To, m.Seq, why, m.Model, m.Alias)}
}

func printOutcome(app *App, m models.Move, o serving.Outcome) {
	if o.Err == nil && len(o.Deliveries) == 0 {
		fmt.Fprintf(app.Out, "%s has no webhooks: serving was not told of this move (set them with: retrain model webhooks %s URL...)\n", m.Model, m.Model)
		return
	}
	fmt.Fprintln(app.Out, o.Summary())
	for _, d := range o.Deliveries {
		fmt.Fprintf(app.Out, "  %s\n", serving.Describe(d))
	}
}

// newWebhooksCommand returns `retrain model webhooks`.
func newWebhooksCommand(app *App, registry func(*cobra.Command) (*models.Registry, error), asJSON *bool) *cobra.Command {
	var clear bool
	var attempts int
	cmd := &cobra.Command{
		Use:   "webhooks NAME [URL...]",
		Short: "Set (URL...), clear (--clear) or show (no URL) the webhooks told of every move of the model's aliases",
		Long: `A model's webhooks hear every move of any of its aliases, whoever makes it: deploy
and canary nodes, on_failure compensations, retrain model promote and rollback. Each
gets a JSON event (model, alias, version, previous_version, checksum, uri, seq, kind,
by, reason, ...), tried --attempts times with backoff; the alias history records what
each answered. A URL may hold ${secret.NAME} (not in its host): it is stored as
written and resolved by whoever sends, a worker from its secrets, this command from
RETRAIN_SECRET_NAME or --secrets-dir. Setting replaces the list.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, urls := args[0], args[1:]
			if clear && len(urls) > 0 {
				return errors.New("give URLs to set, or --clear, not both")
			}
			if err := models.ValidateName("model", name); err != nil {
				return err
			}
			if len(urls) > 0 {
				if err := models.CheckWebhooks(urls, attempts); err != nil {
					return err // before the store is opened: nothing is written
				}
			}
			reg, err := registry(cmd)
			if err != nil {
				return err
			}
			var w models.Webhooks
			switch {
			case clear || len(urls) > 0:
				w, err = reg.SetWebhooks(cmd.Context(), name, urls, attempts, cliActor())
			default:
				w, err = reg.Webhooks(cmd.Context(), name)
			}
			if err != nil {
				return err
			}
			return printWebhooks(app, w, *asJSON)
		},
	}
	cmd.Flags().BoolVar(&clear, "clear", false, "remove every webhook of the model")
	cmd.Flags().IntVar(&attempts, "attempts", webhook.DefaultAttempts, "attempts per webhook and move")
	return cmd
}

// printWebhooks shows w's URLs without user information or query,
// where a credential may be.
func printWebhooks(app *App, w models.Webhooks, asJSON bool) error {
	shown := make([]string, len(w.URLs))
	for i, u := range w.URLs {
		shown[i] = webhook.DisplayURL(u)
	}
	if asJSON {
		w.URLs = shown
		return printJSON(app, w)
	}
	if len(shown) == 0 {
		fmt.Fprintf(app.Out, "%s has no webhooks: alias moves are told to no one\n", w.Model)
		return nil
	}
	fmt.Fprintf(app.Out, "webhooks of %s (%d attempts each; set by %s at %s):\n", w.Model, w.Attempts, w.By.Name, w.Updated.Local().Format(time.DateTime))
	for _, u := range shown {
		fmt.Fprintf(app.Out, "  %s\n", u)
	}
	return nil
}

// newNotifyCommand returns `retrain model notify`: tell the webhooks
// again about the move the alias names now.
func newNotifyCommand(app *App, registry func(*cobra.Command) (*models.Registry, error), f *servingFlags, asJSON *bool) *cobra.Command {
	var alias string
	cmd := &cobra.Command{
		Use:   "notify NAME",
		Short: "Tell the model's webhooks again about the alias's latest move (after they failed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, err := registry(cmd)
			if err != nil {
				return err
			}
			m, err := reg.Latest(cmd.Context(), args[0], alias)
			if err != nil {
				return err
			}
			m.Changed = true // re-sent as the move it was
			return f.announce(cmd.Context(), app, reg, m, *asJSON)
		},
	}
	cmd.Flags().StringVar(&alias, "alias", models.DefaultAlias, "alias")
	return cmd
}

// servingColumn is a move's SERVING cell in the history: what its latest
// notification did.
func servingColumn(m models.Move) string {
	if len(m.Notifications) == 0 {
		return "-"
	}
	n := m.Notifications[len(m.Notifications)-1]
	if f := n.Failed(); f > 0 {
		return fmt.Sprintf("FAILED %d/%d", f, len(n.Deliveries))
	}
	return fmt.Sprintf("told %d/%d", len(n.Deliveries), len(n.Deliveries))
}

// printDeliveries lists, after the history's table, every notification
// round of each move and what each webhook answered.
func printDeliveries(app *App, moves []models.Move) {
	first := true
	for _, m := range moves {
		for _, n := range m.Notifications {
			if first {
				fmt.Fprintln(app.Out, "\nWEBHOOK DELIVERIES")
				first = false
			}
			for _, d := range n.Deliveries {
				fmt.Fprintf(app.Out, "#%d %s by %s: %s\n", m.Seq, n.Time.Local().Format(time.DateTime), cmp.Or(n.By.Name, "-"), serving.Describe(d))
			}
		}
	}
}
