package events

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"berth.dev/berth/internal/outbox"
)

// KafkaRunner feeds one consumer from the booking-events topic, as a
// member of that consumer's own group (so a slow consumer never holds up
// another). Records of one partition, hence of one booking, are handed over
// in offset order; offsets are committed only after every polled event was
// processed or parked, so a crash redelivers rather than loses. Rebalances
// wait until the polled batch is done (BlockRebalanceOnPoll), so two
// members never work on one partition at once.
type KafkaRunner struct {
	Brokers  []string
	Topic    string
	Group    string
	Consumer Consumer
	D        *Dispatcher
	MaxPoll  int
	// Extra options come after berth's (tests shorten group timeouts).
	Extra []kgo.Opt
}

// Run consumes until ctx ends.
func (r *KafkaRunner) Run(ctx context.Context) error {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(r.Brokers...),
		kgo.ClientID("berth-" + r.Consumer.Name()),
		kgo.ConsumerGroup(r.Group),
		kgo.ConsumeTopics(r.Topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		// A new group starts at the oldest retained event: never skip any.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, r.Extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka consumer %s: %w", r.Group, err)
	}
	defer cl.CloseAllowingRebalance()
	log := r.D.Log.With("group", r.Group)
	maxPoll := r.MaxPoll
	if maxPoll <= 0 {
		maxPoll = 1000
	}
	for {
		fetches := cl.PollRecords(ctx, maxPoll)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Warn("kafka fetch", "topic", topic, "partition", p, "err", err)
			}
		})
		var evs []Event
		fetches.EachRecord(func(rec *kgo.Record) {
			e, err := Decode(rec.Value)
			if err != nil {
				r.D.Metrics.undecoded.Inc()
				log.Error("skip a record that is not a berth event", "partition", rec.Partition, "offset", rec.Offset, "err", err)
				return
			}
			evs = append(evs, e)
		})
		for failures := 1; ; failures++ {
			err := r.D.DeliverAll(ctx, []Consumer{r.Consumer}, evs)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				cl.AllowRebalance()
				return nil
			}
			wait := retryBackoff(failures, 100*time.Millisecond, 10*time.Second)
			log.Warn("deliver events; retrying", "err", err, "retry_in", wait.String())
			select {
			case <-ctx.Done():
				cl.AllowRebalance()
				return nil
			case <-time.After(wait):
			}
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
			// The events will be delivered again and skipped as duplicates.
			log.Warn("commit offsets", "err", err)
		}
		cl.AllowRebalance()
	}
}

var uuidRe = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// Decode reads an event from a Kafka record value (a CloudEvents JSON
// envelope).
func Decode(value []byte) (Event, error) {
	ce, err := outbox.ParseEnvelope(value)
	if err != nil {
		return Event{}, err
	}
	if !uuidRe.MatchString(ce.ID) {
		return Event{}, fmt.Errorf("cloud event id %q is not a berth event id", ce.ID)
	}
	id, err := ce.BookingID()
	if err != nil {
		return Event{}, err
	}
	return Event{ID: ce.ID, Type: ce.Type, BookingID: id, Time: ce.Time, Data: ce.Data}, nil
}
