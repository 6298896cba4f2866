package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MoneyLane is what happened to the requests that move money during the
// flash sale: payment starts (as the customers saw them) and the payment
// gateway's webhooks (as berth answered them, from every process's
// metrics). Neither may be shed by a burst of holds.
type MoneyLane struct {
	PayStarts    int    `json:"payStarts"`
	Pay503       int    `json:"pay503"`
	Webhooks     int    `json:"webhooks"`
	Webhook503   int    `json:"webhook503"`
	WebhookError string `json:"webhookError,omitempty"` // why the webhooks were not counted
}

// webhookRoute is the route label of the gateway's webhooks in berth's
// request metrics.
const webhookRoute = "POST /payments/webhook"

// moneyCount is the webhooks berth had answered up to a moment, over every
// process.
type moneyCount struct {
	webhooks, webhook503 float64
	err                  error
}

// scrapeMoney reads every process's webhook answers from its /metrics.
func scrapeMoney(ctx context.Context, c *client, srv *server) moneyCount {
	var mc moneyCount
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, u := range srv.urls {
		series, err := scrapeSeries(ctx, c, u+"/metrics", "berth_http_request_duration_seconds_count")
		if err != nil {
			mc.err = err
			return mc
		}
		all, shed := webhookAnswers(series)
		mc.webhooks += all
		mc.webhook503 += shed
	}
	return mc
}

// webhookAnswers sums the webhook answers of one process's request
// counters: all of them, and the 503s.
func webhookAnswers(series []sample) (all, shed float64) {
	for _, s := range series {
		if s.labels["route"] != webhookRoute {
			continue
		}
		all += s.value
		if s.labels["status"] == "503" {
			shed += s.value
		}
	}
	return all, shed
}

// moneyLane builds the money lane's report from the open loop's payment
// starts and the webhook counters read before and after it.
func moneyLane(open *OpenResult, before, after moneyCount) *MoneyLane {
	m := &MoneyLane{}
	if pay := open.Op("pay"); pay != nil {
		m.PayStarts = pay.Answered - pay.Count(OutcomeSkipped) - pay.Count(OutcomeCutOff) - pay.Count(OutcomeUnsent)
		for _, s := range pay.Outcomes {
			if strings.HasPrefix(s.Outcome, "503") {
				m.Pay503 += s.Count
			}
		}
	}
	if err := errors.Join(before.err, after.err); err != nil {
		m.WebhookError = err.Error()
		return m
	}
	m.Webhooks = int(after.webhooks - before.webhooks)
	m.Webhook503 = int(after.webhook503 - before.webhook503)
	return m
}

// sample is one series of a Prometheus text page.
type sample struct {
	labels map[string]string
	value  float64
}

// scrapeSeries reads every series of one metric from a Prometheus text
// page.
func scrapeSeries(ctx context.Context, c *client, url, name string) ([]sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %d", pathOf(url), resp.StatusCode)
	}
	return parseSeries(resp.Body, name)
}

// parseSeries reads the series of metric name from a Prometheus text page:
// name{label="value",…} value. Label values may hold braces, commas and
// escaped quotes (a route label is "POST /bookings/{id}/payments").
func parseSeries(r io.Reader, name string) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue // another metric, or a longer name
		}
		labels := map[string]string{}
		if strings.HasPrefix(rest, "{") {
			var err error
			if labels, rest, err = parseLabels(rest[1:]); err != nil {
				return nil, fmt.Errorf("%s: %w in %q", name, err, line)
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("%s: no value in %q", name, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, sample{labels: labels, value: v})
	}
	return out, sc.Err()
}

// parseLabels reads label="value" pairs up to the closing brace and
// returns them with what follows the brace.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return labels, s[1:], nil
		}
		k, rest, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(rest, `"`) {
			return nil, "", errors.New("malformed labels")
		}
		var v strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(rest[i])
				}
				continue
			}
			v.WriteByte(rest[i])
		}
		if i >= len(rest) {
			return nil, "", errors.New("unterminated label value")
		}
		labels[strings.TrimSpace(k)] = v.String()
		s = rest[i+1:]
	}
}
