// Command pion-whep is a baseline WHEP fan-out server built on pion/webrtc v4, for
// benchmarking tern against an independent WebRTC stack (bench/pion.sh).
//
// It loops one clip (H264 Annex B + Ogg Opus) forever in real time and writes it to one
// TrackLocalStaticSample per kind that every viewer shares: the idiomatic pion broadcast.
// Signalling is non-trickle WHEP: POST /live/demo/whep with an SDP offer answers 201 with
// the SDP answer (ICE gathering complete) and a Location; DELETE of that Location ends the
// session. All media uses one UDP port (ICE UDP mux) with a single host candidate, as tern
// does. It is a baseline, not a product: no auth, no trickle, one stream.
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"
	"github.com/pion/webrtc/v4/pkg/media/h264reader"
	"github.com/pion/webrtc/v4/pkg/media/oggreader"
)

const (
	fps           = 30
	opusRate      = 50 // Opus packets per second (20 ms)
	frameDuration = time.Second / fps
	opusDuration  = time.Second / opusRate
	whepPath      = "/live/demo/whep"
)

func main() {
	httpAddr := flag.String("http", "127.0.0.1:18580", "HTTP listener for WHEP")
	udpPort := flag.Int("udp", 18581, "the one UDP port for all media")
	ip := flag.String("ip", "127.0.0.1", "address to bind the media port to and announce as the host candidate")
	clipPath := flag.String("clip", "assets/clip/lite.h264", "H264 Annex B clip (30 fps, AUD before every frame)")
	audioPath := flag.String("audio", "assets/clip/demo.opus", "Ogg Opus clip (20 ms packets)")
	lite := flag.Bool("lite", false, "ICE lite (answer checks only, as tern does) instead of full ICE")
	passive := flag.Bool("dtls-passive", false, "answer a=setup:passive (DTLS server, as tern does) instead of pion's default active")
	withPprof := flag.Bool("pprof", false, "serve net/http/pprof under /debug/pprof/ on the HTTP listener")
	flag.Parse()

	frames, err := readH264(*clipPath)
	if err != nil {
		log.Fatalf("video clip: %v", err)
	}
	opus, err := readOpus(*audioPath)
	if err != nil {
		log.Fatalf("audio clip: %v", err)
	}
	// Loop audio over the same span as video, as tern's clip source does.
	if n := len(frames) * opusRate / fps; n > 0 && n < len(opus) {
		opus = opus[:n]
	}

	s, err := newServer(*ip, *udpPort, *lite, *passive)
	if err != nil {
		log.Fatal(err)
	}
	go pace(s.video, frames, frameDuration)
	go pace(s.audio, opus, opusDuration)

	mux := http.NewServeMux()
	mux.HandleFunc("POST "+whepPath, s.offer)
	mux.HandleFunc("HEAD "+whepPath, func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("DELETE "+whepPath+"/{id}", s.remove)
	mux.HandleFunc("GET /stats", s.stats)
	if *withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
	}
	log.Printf("pion-whep: %d frames, %d opus packets; WHEP on http://%s%s, media udp %s:%d, lite=%v, dtls-passive=%v",
		len(frames), len(opus), *httpAddr, whepPath, *ip, *udpPort, *lite, *passive)
	log.Fatal(http.ListenAndServe(*httpAddr, mux))
}

type server struct {
	api          *webrtc.API
	cert         webrtc.Certificate
	video, audio *webrtc.TrackLocalStaticSample

	mu       sync.Mutex
	sessions map[string]*webrtc.PeerConnection
	next     atomic.Uint64
	created  atomic.Uint64
	failed   atomic.Uint64
}

func newServer(ip string, port int, lite, passive bool) (*server, error) {
	m := &webrtc.MediaEngine{}
	// Exactly the clip's codecs, with the payload types tern's lean client offers.
	if err := m.RegisterCodec(webrtc.RTPCodecParameters{
		RTPCodecCapability: webrtc.RTPCodecCapability{
			MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
			SDPFmtpLine:  "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
			RTCPFeedback: []webrtc.RTCPFeedback{{Type: "nack"}, {Type: "nack", Parameter: "pli"}, {Type: "ccm", Parameter: "fir"}},
		},
		PayloadType: 96,
	}, webrtc.RTPCodecTypeVideo); err != nil {
		return nil, err
	}
	if err := m.RegisterCodec(webrtc.RTPCodecParameters{
		RTPCodecCapability: webrtc.RTPCodecCapability{
			MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2,
			SDPFmtpLine: "minptime=10;useinbandfec=1",
		},
		PayloadType: 111,
	}, webrtc.RTPCodecTypeAudio); err != nil {
		return nil, err
	}
	// NACK responder, RTCP sender/receiver reports, stats, TWCC: what a pion app gets by default.
	ir := &interceptor.Registry{}
	if err := webrtc.RegisterDefaultInterceptors(m, ir); err != nil {
		return nil, err
	}

	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ip), Port: port})
	if err != nil {
		return nil, err
	}
	var se webrtc.SettingEngine
	se.SetICEUDPMux(webrtc.NewICEUDPMux(nil, conn))
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetIncludeLoopbackCandidate(true) // the mux is bound to ip, which may be 127.0.0.1
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetLite(lite)
	if passive {
		if err := se.SetAnsweringDTLSRole(webrtc.DTLSRoleServer); err != nil {
			return nil, err
		}
	}

	// One certificate for all sessions, as tern has.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cert, err := webrtc.GenerateCertificate(key)
	if err != nil {
		return nil, err
	}

	video, err := webrtc.NewTrackLocalStaticSample(
		webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
			SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"},
		"video", "tern-pion")
	if err != nil {
		return nil, err
	}
	audio, err := webrtc.NewTrackLocalStaticSample(
		webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2},
		"audio", "tern-pion")
	if err != nil {
		return nil, err
	}
	return &server{
		api: webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(ir),
			webrtc.WithSettingEngine(se)),
		cert:     *cert,
		video:    video,
		audio:    audio,
		sessions: make(map[string]*webrtc.PeerConnection),
	}, nil
}

// offer answers a WHEP POST: one PeerConnection per viewer with the two shared tracks.
func (s *server) offer(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pc, err := s.api.NewPeerConnection(webrtc.Configuration{Certificates: []webrtc.Certificate{s.cert}})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	answer, err := s.negotiate(pc, string(body))
	if err != nil {
		s.failed.Add(1)
		_ = pc.Close()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := strconv.FormatUint(s.next.Add(1), 10)
	s.mu.Lock()
	s.sessions[id] = pc
	s.mu.Unlock()
	s.created.Add(1)
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		if st == webrtc.PeerConnectionStateFailed || st == webrtc.PeerConnectionStateClosed {
			if st == webrtc.PeerConnectionStateFailed {
				s.failed.Add(1)
			}
			s.drop(id)
		}
	})
	w.Header().Set("Content-Type", "application/sdp")
	w.Header().Set("Location", whepPath+"/"+id)
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, answer)
}

func (s *server) negotiate(pc *webrtc.PeerConnection, offer string) (string, error) {
	for _, t := range []webrtc.TrackLocal{s.video, s.audio} {
		sender, err := pc.AddTrack(t)
		if err != nil {
			return "", err
		}
		// Read RTCP so the interceptors see receiver reports and NACKs.
		go func() {
			buf := make([]byte, 1500)
			for {
				if _, _, err := sender.Read(buf); err != nil {
					return
				}
			}
		}()
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
		return "", err
	}
	answer, err := pc.CreateAnswer(nil)
	if err != nil {
		return "", err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(answer); err != nil {
		return "", err
	}
	<-gathered
	return pc.LocalDescription().SDP, nil
}

func (s *server) remove(w http.ResponseWriter, r *http.Request) {
	if !s.drop(r.PathValue("id")) {
		http.NotFound(w, r)
	}
}

// drop closes and forgets a session; false when it was not there.
func (s *server) drop(id string) bool {
	s.mu.Lock()
	pc, ok := s.sessions[id]
	delete(s.sessions, id)
	s.mu.Unlock()
	if ok {
		go func() { _ = pc.Close() }()
	}
	return ok
}

// stats reports session counts and the Go heap as JSON, for the benchmark scripts.
// live_bytes is the Go runtime's HeapAlloc (bytes of allocated heap objects, the
// counterpart of tern's counting allocator; ReadMemStats stops the world briefly, so the
// scripts read it a few times per run, not per packet).
func (s *server) stats(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	n := len(s.sessions)
	s.mu.Unlock()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"server":"pion","sessions":%d,"created":%d,"failed":%d,"live_bytes":%d,"heap_sys_bytes":%d}`+"\n",
		n, s.created.Load(), s.failed.Load(), m.HeapAlloc, m.HeapSys)
}

// pace writes the samples to track in real time, forever. Sample i is due at start + i*d:
// a late write is caught up rather than skipped (a time.Ticker would drop ticks while a
// write to many viewers overruns d, and the stream would play slow).
func pace(track *webrtc.TrackLocalStaticSample, samples [][]byte, d time.Duration) {
	start := time.Now()
	for i := 0; ; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * d)))
		err := track.WriteSample(media.Sample{Data: samples[i%len(samples)], Duration: d})
		if err != nil && !errors.Is(err, io.ErrClosedPipe) {
			log.Printf("write sample: %v", err)
		}
	}
}

// readH264 splits an Annex B file into access units at its access-unit delimiters and
// returns each as Annex B bytes (pion's H264 payloader drops the AUDs and aggregates
// SPS/PPS with the IDR).
func readH264(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := h264reader.NewReader(f)
	if err != nil {
		return nil, err
	}
	var frames [][]byte
	var cur []byte
	for {
		nal, err := r.NextNAL()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if nal.UnitType == h264reader.NalUnitTypeAUD && len(cur) > 0 {
			frames = append(frames, cur)
			cur = nil
		}
		cur = append(cur, 0, 0, 0, 1)
		cur = append(cur, nal.Data...)
	}
	if len(cur) > 0 {
		frames = append(frames, cur)
	}
	if len(frames) == 0 {
		return nil, errors.New("no access units")
	}
	return frames, nil
}

// readOpus returns the Opus packets of an Ogg Opus file. pion's oggreader returns whole
// pages and keeps the lacing table private, and ffmpeg packs many packets into one page,
// so the oggreader only checks the OpusHead here and the packets are split from the
// pages' segment tables by hand (RFC 3533 §6: a packet ends at a lacing value below 255).
func readOpus(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if _, _, err := oggreader.NewWith(bytes.NewReader(data)); err != nil {
		return nil, err
	}
	var packets [][]byte
	var cur []byte
	for p := data; len(p) > 0; {
		if len(p) < 27 || string(p[:4]) != "OggS" {
			return nil, errors.New("bad Ogg page")
		}
		nseg := int(p[26])
		if len(p) < 27+nseg {
			return nil, errors.New("short Ogg page")
		}
		lacing := p[27 : 27+nseg]
		body := p[27+nseg:]
		for _, l := range lacing {
			if len(body) < int(l) {
				return nil, errors.New("short Ogg page body")
			}
			cur = append(cur, body[:l]...)
			body = body[l:]
			if l < 255 {
				packets = append(packets, cur)
				cur = nil
			}
		}
		p = body
	}
	// Skip the OpusHead and OpusTags headers (RFC 7845 §5).
	var out [][]byte
	for _, pk := range packets {
		if bytes.HasPrefix(pk, []byte("OpusHead")) || bytes.HasPrefix(pk, []byte("OpusTags")) {
			continue
		}
		out = append(out, pk)
	}
	if len(out) == 0 {
		return nil, errors.New("no Opus packets")
	}
	return out, nil
}
