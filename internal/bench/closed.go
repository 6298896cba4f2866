package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/pprof"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Names of the closed-loop measurements.
const (
	HotFlight         = "hot-flight"
	HotFlightOne      = "hot-flight-1"
	HotFlightMore     = "hot-flight-more" // HotClientsMore clients
	RejectSoldOut     = "reject-sold-out"
	RejectWaitingRoom = "reject-waiting-room"
	BareNetHTTP       = "bare-net-http"
)

// closedLoops runs the closed-loop measurements of one mode: commits on one
// hot flight, then the bare net/http ceiling and the rejection paths,
// measured back to back so that they share the machine's state.
func closedLoops(ctx context.Context, o *Options, c *client, srv *server, pool *pgxpool.Pool, protect bool,
	soldOutFlight int64, features map[string]string) ([]*ClosedResult, error) {
	var out []*ClosedResult

	// The quiet day first (one client), then the hot flight: each on
	// flights of its own, each with the database's work per hold. Every
	// loop's flights are created first, so that their creation is no
	// loop's work, and one count between loops serves the loop before it
	// and the one after.
	loops := []int{1, o.HotClients, o.HotClientsMore}
	planes := make([][]int64, len(loops))
	for k, clients := range loops {
		if clients == 0 {
			continue
		}
		hot, err := createHotFlights(ctx, c, srv, hotFlightCount(o.ClosedDuration))
		if err != nil {
			return nil, err
		}
		planes[k] = hot
	}
	settle := o.StatsSettle
	before := measureDBWork(ctx, pool, c, srv, settle)
	for k, clients := range loops {
		if clients == 0 {
			continue
		}
		hot := planes[k]
		name := []string{HotFlightOne, HotFlight, HotFlightMore}[k]
		limit := len(hot) * hotPairsPerPlane
		customers := srv.tokenBook(int64(hotCustomers+3_000_000*k), limit)
		profiling := protect && k == 1 && o.HotProfile != nil && pprof.StartCPUProfile(o.HotProfile) == nil
		res := runClosed(ctx, closedSpec{
			name: name, what: fmt.Sprintf("holds of two seats committed on one flight at a time, %d clients", clients),
			clients: clients, dur: o.ClosedDuration, limit: int64(limit), good: "201", timeout: o.Timeout,
		}, func(ctx context.Context, i int64) answer {
			flightID, seats := hotPair(hot, i)
			body, _ := json.Marshal(holdBody{FlightID: flightID, FareClass: "ECONOMY", Seats: seats})
			return c.do(ctx, call{method: http.MethodPost, url: srv.at(i) + "/bookings",
				token: customers.of(i), body: body})
		})
		if profiling {
			pprof.StopCPUProfile()
			o.HotProfile = nil // one profile a run
		}
		after := measureDBWork(ctx, pool, c, srv, settle)
		res.setDBWork(before, after, settle)
		before = after
		out = append(out, res)
	}

	// Rejections are sent by a fixed set of customers.
	rejecters := srv.tokenBook(rejectCustomers, rejectTokenSlots)
	reject := func(name, what, good string, body []byte, base func(int64) string) *ClosedResult {
		return runClosed(ctx, closedSpec{name: name, what: what, clients: o.RejectClients, dur: o.ClosedDuration, good: good, timeout: o.Timeout},
			func(ctx context.Context, i int64) answer {
				return c.do(ctx, call{method: http.MethodPost, url: base(i) + "/bookings", token: rejecters.of(i % rejectTokenSlots), body: body})
			})
	}

	bare, err := startBare()
	if err != nil {
		return nil, err
	}
	soldOutBody, _ := json.Marshal(holdBody{FlightID: soldOutFlight, FareClass: "ECONOMY", Quantity: 1})
	out = append(out, reject(BareNetHTTP, fmt.Sprintf("a bare net/http handler answering a fixed 409 problem, %d clients", o.RejectClients),
		"409 sold_out", soldOutBody, func(int64) string { return bare.url }))
	bare.close()

	out = append(out, reject(RejectSoldOut, fmt.Sprintf("holds on a sold-out class, %d clients", o.RejectClients),
		"409 sold_out", soldOutBody, srv.at))

	wr := &ClosedResult{Name: RejectWaitingRoom, What: fmt.Sprintf("holds without admission on a flight whose waiting room is on, %d clients", o.RejectClients)}
	switch {
	case !protect:
		wr.Skipped = "the bare design has no waiting room"
	default:
		id, err := createSaleFlight(ctx, c, srv)
		if err != nil {
			return nil, err
		}
		err = enableWaitingRoom(ctx, c, srv, id, 1)
		var se *statusError
		switch {
		case errors.As(err, &se) && se.missingRoute():
			wr.Skipped = "unavailable in this build: " + se.Error()
			features["waitingRoomReject"] = wr.Skipped
		case err != nil:
			return nil, fmt.Errorf("switch the waiting room on: %w", err)
		default:
			body, _ := json.Marshal(holdBody{FlightID: id, FareClass: "ECONOMY", Seats: []string{"12A"}})
			wr = reject(RejectWaitingRoom, wr.What, "429 waiting_room", body, srv.at)
		}
	}
	out = append(out, wr)
	return out, nil
}

// bareServer is the ceiling the rejection path is compared with: a plain
// net/http handler that answers every request with a small fixed problem
// document, measured with the same client and the same requests.
type bareServer struct {
	url string
	srv *http.Server
}

var bareProblem = []byte(`{"type":"https://berth.dev/problems/sold_out","title":"Conflict","status":409,"detail":"sold out","code":"sold_out"}` + "\n")

func startBare() (*bareServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write(bareProblem)
		}),
	}
	go func() { _ = srv.Serve(ln) }()
	return &bareServer{url: "http://" + ln.Addr().String(), srv: srv}, nil
}

func (b *bareServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.srv.Shutdown(ctx)
}
