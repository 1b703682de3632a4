// Command pion-viewer is a WHEP viewer built on pion/webrtc v4 with its default
// interceptors (transport-wide congestion control feedback, NACK generator and responder,
// receiver reports), as a player built on pion plays a stream. The adaptive tests
// (tests/browser/adaptive-clients.test.mjs) run it, some behind a rate-limited link.
//
//	pion-viewer -whep URL [-seconds N] [-every MS] [-nack-all]
//
// It offers to receive video and audio, POSTs the offer (ICE gathering complete) and
// applies the answer, then reads both tracks. Every -every ms it prints one JSON line of
// cumulative figures: video packets and bytes, complete frames (pion's sample builder),
// packets lost (never arrived, excluding the newest 100 that a retransmission may still
// fill), duplicate packets (retransmissions of what had arrived) and their bytes, audio
// packets and the longest gap between two audio packets in the interval; and, to tell
// which packets were lost, the highest video sequence number so far and the ones counted
// lost since the line before (both as offsets from the first packet's number, extended
// past the 16-bit wrap). -nack-all makes it
// a hostile client: it NACKs every video packet it receives, at once. At the end, or on
// SIGTERM or SIGINT, it DELETEs its session.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/samplebuilder"
)

// report is one line of output.
type report struct {
	Ms         int64  `json:"ms"`
	Location   string `json:"location"`
	Codec      string `json:"codec"`
	VideoPkts  int64  `json:"video_packets"`
	VideoBytes int64  `json:"video_bytes"`
	Frames     int64  `json:"frames"`
	Lost       int64  `json:"lost"`
	Highest    int64  `json:"highest"`
	LostSeqs   []int64 `json:"lost_seqs"`
	Dups       int64  `json:"dups"`
	DupBytes   int64  `json:"dup_bytes"`
	AudioPkts  int64  `json:"audio_packets"`
	AudioGapMs int64  `json:"audio_gap_ms"`
	Nacked     int64  `json:"nacked"`
}

// seqLog remembers which extended sequence numbers arrived, and which of them are
// counted lost (offsets below `counted`).
type seqLog struct {
	first, highest int64
	last           uint16
	started        bool
	got            []bool
	counted, lostN int64
}

// add records seq and says whether it had arrived before.
func (s *seqLog) add(seq uint16) (ext int64, dup bool) {
	if !s.started {
		s.started, s.first, s.highest, s.last = true, int64(seq), int64(seq), seq
	}
	ext = s.highest + int64(int16(seq-uint16(s.highest)))
	if ext > s.highest {
		s.highest = ext
	}
	i := ext - s.first
	if i < 0 {
		return ext, false
	}
	for int64(len(s.got)) <= i {
		s.got = append(s.got, false)
	}
	dup = s.got[i]
	s.got[i] = true
	return ext, dup
}

// lost counts the missing numbers up to 100 before the highest, and returns the offsets
// newly counted.
func (s *seqLog) lost() (int64, []int64) {
	fresh := []int64{}
	for ; s.counted < s.highest-s.first-100 && s.counted < int64(len(s.got)); s.counted++ {
		if !s.got[s.counted] {
			s.lostN++
			fresh = append(fresh, s.counted)
		}
	}
	return s.lostN, fresh
}

func main() {
	whep := flag.String("whep", "", "WHEP endpoint URL")
	seconds := flag.Int("seconds", 60, "how long to watch")
	every := flag.Int("every", 500, "report interval (ms)")
	nackAll := flag.Bool("nack-all", false, "NACK every video packet received")
	flag.Parse()
	if *whep == "" {
		log.Fatal("-whep URL is required")
	}

	se := webrtc.SettingEngine{}
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	me := &webrtc.MediaEngine{}
	if err := me.RegisterDefaultCodecs(); err != nil {
		log.Fatal(err)
	}
	reg := &interceptor.Registry{}
	if err := webrtc.RegisterDefaultInterceptors(me, reg); err != nil {
		log.Fatal(err)
	}
	api := webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithInterceptorRegistry(reg), webrtc.WithSettingEngine(se))
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		log.Fatal(err)
	}
	defer pc.Close()
	for _, k := range []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecTypeAudio} {
		if _, err := pc.AddTransceiverFromKind(k, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
			log.Fatal(err)
		}
	}

	var mu sync.Mutex
	var r report
	video := &seqLog{}
	lastAudio := time.Time{}
	start := time.Now()

	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		if tr.Kind() == webrtc.RTPCodecTypeAudio {
			for {
				if _, _, err := tr.ReadRTP(); err != nil {
					return
				}
				now := time.Now()
				mu.Lock()
				if !lastAudio.IsZero() {
					if g := now.Sub(lastAudio).Milliseconds(); g > r.AudioGapMs {
						r.AudioGapMs = g
					}
				}
				lastAudio = now
				r.AudioPkts++
				mu.Unlock()
			}
		}
		mime := strings.ToLower(tr.Codec().MimeType)
		var dep rtp.Depacketizer = &codecs.H264Packet{}
		if strings.Contains(mime, "vp8") {
			dep = &codecs.VP8Packet{}
		}
		mu.Lock()
		r.Codec = mime
		mu.Unlock()
		sb := samplebuilder.New(100, dep, tr.Codec().ClockRate)
		for {
			p, _, err := tr.ReadRTP()
			if err != nil {
				return
			}
			mu.Lock()
			_, dup := video.add(p.SequenceNumber)
			r.VideoPkts++
			r.VideoBytes += int64(len(p.Payload))
			if dup {
				r.Dups++
				r.DupBytes += int64(len(p.Payload))
			}
			mu.Unlock()
			if *nackAll {
				nack := &rtcp.TransportLayerNack{MediaSSRC: uint32(tr.SSRC()), Nacks: rtcp.NackPairsFromSequenceNumbers([]uint16{p.SequenceNumber})}
				if err := pc.WriteRTCP([]rtcp.Packet{nack}); err == nil {
					mu.Lock()
					r.Nacked++
					mu.Unlock()
				}
			}
			if dup {
				continue
			}
			sb.Push(p)
			for s := sb.Pop(); s != nil; s = sb.Pop() {
				mu.Lock()
				r.Frames++
				mu.Unlock()
			}
		}
	})

	offer, err := pc.CreateOffer(nil)
	if err != nil {
		log.Fatal(err)
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		log.Fatal(err)
	}
	<-gathered
	resp, err := http.Post(*whep, "application/sdp", bytes.NewBufferString(pc.LocalDescription().SDP))
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		log.Fatalf("WHEP POST: %d %s", resp.StatusCode, body)
	}
	loc := resp.Header.Get("Location")
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(body)}); err != nil {
		log.Fatal(err)
	}
	mu.Lock()
	r.Location = loc
	mu.Unlock()

	enc := json.NewEncoder(os.Stdout)
	tick := time.NewTicker(time.Duration(*every) * time.Millisecond)
	defer tick.Stop()
	// SIGTERM or SIGINT ends the watch early, and the session with a DELETE: a viewer that
	// just vanished would keep its session (and its share of a narrow link the next test's
	// viewer uses) until tern's consent timeout.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
watch:
	for end := start.Add(time.Duration(*seconds) * time.Second); time.Now().Before(end); {
		select {
		case <-tick.C:
		case <-stop:
			break watch
		}
		mu.Lock()
		r.Ms = time.Since(start).Milliseconds()
		r.Lost, r.LostSeqs = video.lost()
		r.Highest = video.highest - video.first
		out := r
		r.AudioGapMs = 0
		mu.Unlock()
		if err := enc.Encode(out); err != nil {
			log.Fatal(err)
		}
	}
	if u, err := url.Parse(*whep); err == nil && loc != "" {
		if l, err := u.Parse(loc); err == nil {
			req, _ := http.NewRequest(http.MethodDelete, l.String(), nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	fmt.Fprintln(os.Stderr, "done")
}
