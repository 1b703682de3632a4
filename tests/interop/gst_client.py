"""GStreamer's webrtcbin (Debian's 1.22, through PyGObject) against tern: a WHIP publisher
or a WHEP viewer, with webrtcbin's own default DTLS certificate (RSA-2048, made by OpenSSL).
tests/browser/gstreamer.test.mjs runs it; run it with Debian's /usr/bin/python3 (python3-gi).

    python3 gst_client.py publish URL SECONDS [h264|h265|vp8]
        Publishes H264 (x264, constrained baseline, 640x360 at 30 fps, a keyframe a second;
        or H265 with x265, or VP8 with libvpx, the same picture and keyframe interval) and
        Opus to the WHIP URL for SECONDS, then DELETEs the session. Prints one JSON line:
        status, the peer connection state reached, the certificate's key type, the DELETE
        status. (webrtcbin 1.22's outbound stats read 0 packets here, so what arrives is
        counted by the viewer the test plays the stream with.)
    python3 gst_client.py view URL SECONDS [max-bundle|max-compat|balanced|none]
        Plays the WHEP URL for SECONDS (webrtcbin's bundle-policy: max-bundle by default), decoding H264 (avdec_h264) and Opus, then DELETEs.
        Prints one JSON line: status, state reached, video frames and audio buffers decoded,
        the longest gap between decoded video frames, the certificate's key type.

No STUN or TURN server is set: webrtcbin gathers host candidates only. libnice leaves out
loopback interfaces and binds each candidate to its address, so tern must announce an address
of another local interface: the tests run inside scripts/netns-run.sh's private namespace and
start tern on its veth address 198.18.0.1, which exists only there.
"""

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstWebRTC", "1.0")
gi.require_version("GstSdp", "1.0")
from gi.repository import GLib, Gst, GstSdp, GstWebRTC  # noqa: E402

Gst.init(None)

H264_CAPS = (
    "application/x-rtp,media=video,encoding-name=H264,payload=102,clock-rate=90000,"
    "packetization-mode=(string)1,profile-level-id=(string)42e01f"
)
# What rtph264pay sends: its profile-level-id comes from x264's SPS.
H264_SEND_CAPS = "application/x-rtp,media=video,encoding-name=H264,payload=102,clock-rate=90000"
OPUS_CAPS = (
    "application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000,"
    "encoding-params=(string)2"
)


def http(method, url, body=None):
    req = urllib.request.Request(
        url,
        data=body.encode() if body is not None else None,
        method=method,
        headers={"Content-Type": "application/sdp"} if body is not None else {},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode(), r.headers.get("Location")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), None


class Session:
    """One webrtcbin: offer (after ICE gathering, no trickle), POST, answer, run, DELETE."""

    def __init__(self, url, pipeline):
        self.url = url
        self.pipe = Gst.parse_launch(pipeline)
        if not isinstance(self.pipe, Gst.Pipeline):
            # A description with one element parses to that element, not a pipeline.
            element, self.pipe = self.pipe, Gst.Pipeline.new("p")
            self.pipe.add(element)
        self.w = self.pipe.get_by_name("w")
        self.loop = GLib.MainLoop()
        self.result = {"status": None, "state": "new"}
        self.location = None
        self.posted = False
        self.w.connect("on-negotiation-needed", self.on_negotiation_needed)
        self.w.connect("notify::ice-gathering-state", self.on_gathering)
        self.w.connect("notify::connection-state", self.on_state)

    def on_state(self, w, _pspec):
        state = w.get_property("connection-state").value_nick
        # Keep the furthest state: "connected" must not be overwritten by a later close.
        if self.result["state"] != "connected" or state == "failed":
            self.result["state"] = state

    def on_negotiation_needed(self, w):
        promise = Gst.Promise.new_with_change_func(self.on_offer, w, None)
        w.emit("create-offer", None, promise)

    def on_offer(self, promise, w, _):
        promise.wait()
        reply = promise.get_reply()
        offer = reply.get_value("offer") if reply and reply.has_field("offer") else None
        if offer is None:
            self.result["error"] = f"create-offer: {reply.to_string() if reply else None}"
            GLib.idle_add(self.loop.quit)
            return
        w.emit("set-local-description", offer, Gst.Promise.new())

    def on_gathering(self, w, _pspec):
        if w.get_property("ice-gathering-state") == GstWebRTC.WebRTCICEGatheringState.COMPLETE:
            GLib.idle_add(self.post_offer)

    def post_offer(self):
        if self.posted:
            return False
        self.posted = True
        sdp = self.w.get_property("local-description").sdp.as_text()
        status, body, location = http("POST", self.url, sdp)
        self.result["status"] = status
        self.location = location
        if status != 201:
            self.result["error"] = body[:300]
            self.loop.quit()
            return False
        _, msg = GstSdp.SDPMessage.new_from_text(body)
        answer = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, msg)
        self.w.emit("set-remote-description", answer, Gst.Promise.new())
        return False

    def run(self, seconds):
        self.pipe.set_state(Gst.State.PLAYING)
        GLib.timeout_add(int(seconds * 1000), self.loop.quit)
        bus = self.pipe.get_bus()
        bus.add_signal_watch()
        bus.connect("message::error", self.on_error)
        self.loop.run()

    def on_error(self, _bus, msg):
        err, dbg = msg.parse_error()
        self.result["error"] = f"{err.message} ({dbg})"[:400]
        self.loop.quit()

    def stats(self):
        promise = Gst.Promise.new()
        self.w.emit("get-stats", None, promise)
        promise.wait()
        reply = promise.get_reply()
        out = []
        if reply is None:
            return out

        def each(field, value, _):
            if isinstance(value, Gst.Structure):
                out.append((GLib.quark_to_string(field), value))
            return True

        reply.foreach(each, None)
        return out

    def finish(self):
        self.result["key"] = key_type(self.pipe)
        if self.location:
            status, _, _ = http("DELETE", urllib.parse.urljoin(self.url, self.location))
            self.result["delete"] = status
        self.pipe.set_state(Gst.State.NULL)


def key_type(pipe):
    """The public key of the certificate webrtcbin really used: read from its dtlssrtpdec
    element's "pem" property and described by `openssl x509`, e.g. "rsaEncryption 2048"."""
    it = pipe.iterate_recurse()
    while True:
        ok, el = it.next()
        if ok != Gst.IteratorResult.OK:
            return None
        f = el.get_factory()
        if f is not None and f.get_name() == "dtlssrtpdec":
            pem = el.get_property("pem")
            if not pem:
                return None
            text = subprocess.run(
                ["openssl", "x509", "-noout", "-text"],
                input=pem.encode(),
                capture_output=True,
                check=False,
            ).stdout.decode()
            alg = re.search(r"Public Key Algorithm: (\S+)", text)
            bits = re.search(r"Public-Key: \((\d+) bit\)", text)
            return f"{alg.group(1) if alg else '?'} {bits.group(1) if bits else '?'}"


# The video encoder and payloader of each codec `publish` sends.
VIDEO_SEND = {
    "h264": "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 bitrate=800 "
    "! video/x-h264,profile=constrained-baseline ! rtph264pay config-interval=-1 "
    "aggregate-mode=zero-latency ! " + H264_SEND_CAPS,
    # x265's default open GOPs: its keyframes after the first are CRA pictures, in front of
    # which rtph265pay puts no VPS, SPS or PPS (it does so before IDR pictures only): tern
    # puts the last ones there (ingest), so LL-HLS, recordings and thumbnails that start at
    # a CRA decode it.
    "h265": "x265enc tune=zerolatency speed-preset=ultrafast key-int-max=30 bitrate=800 "
    "! video/x-h265,profile=main ! rtph265pay config-interval=-1 "
    "! application/x-rtp,media=video,encoding-name=H265,payload=103,clock-rate=90000",
    "vp8": "vp8enc deadline=1 keyframe-max-dist=30 target-bitrate=800000 ! rtpvp8pay "
    "! application/x-rtp,media=video,encoding-name=VP8,payload=96,clock-rate=90000",
}


def publish(url, seconds, codec="h264"):
    s = Session(
        url,
        "webrtcbin name=w bundle-policy=max-bundle "
        "videotestsrc is-live=true pattern=ball ! video/x-raw,width=640,height=360,framerate=30/1 "
        "! videoconvert ! " + VIDEO_SEND[codec] + " ! w. "
        "audiotestsrc is-live=true wave=sine ! audioconvert ! audioresample ! opusenc "
        "! rtpopuspay ! " + OPUS_CAPS + " ! w.",
    )
    for i in range(2):
        t = s.w.emit("get-transceiver", i)
        if t is not None:
            t.set_property("direction", GstWebRTC.WebRTCRTPTransceiverDirection.SENDONLY)
    s.run(seconds)
    s.finish()
    return s.result


def view(url, seconds, policy="max-bundle"):
    # With max-bundle (the default here, as WHIP/WHEP clients set it) webrtcbin 1.22 offers
    # every section after the first with port 0 and a=bundle-only (RFC 8843 §6).
    s = Session(url, "webrtcbin name=w bundle-policy=" + policy)
    s.result.update(frames_decoded=0, audio_buffers=0, longest_gap_ms=None, first_frame_ms=None)
    start = time.monotonic()
    last = [None]

    def on_video(_pad, _info):
        now = time.monotonic()
        s.result["frames_decoded"] += 1
        if s.result["first_frame_ms"] is None:
            s.result["first_frame_ms"] = int((now - start) * 1000)
        if last[0] is not None:
            gap = int((now - last[0]) * 1000)
            s.result["longest_gap_ms"] = max(s.result["longest_gap_ms"] or 0, gap)
        last[0] = now
        return Gst.PadProbeReturn.OK

    def on_audio(_pad, _info):
        s.result["audio_buffers"] += 1
        return Gst.PadProbeReturn.OK

    def on_pad(_w, pad):
        if pad.direction != Gst.PadDirection.SRC:
            return
        caps = pad.get_current_caps().to_string()
        if "media=(string)video" in caps:
            chain = "rtph264depay ! h264parse ! avdec_h264 ! videoconvert ! fakesink name=vsink sync=false"
        elif "media=(string)audio" in caps:
            chain = "rtpopusdepay ! opusdec ! fakesink name=asink sync=false"
        else:
            return
        bin_ = Gst.parse_bin_from_description(chain, True)
        s.pipe.add(bin_)
        bin_.sync_state_with_parent()
        pad.link(bin_.get_static_pad("sink"))
        sink = bin_.get_by_name("vsink") or bin_.get_by_name("asink")
        probe = on_video if sink.get_name() == "vsink" else on_audio
        sink.get_static_pad("sink").add_probe(Gst.PadProbeType.BUFFER, probe)

    s.w.connect("pad-added", on_pad)
    recv = GstWebRTC.WebRTCRTPTransceiverDirection.RECVONLY
    s.w.emit("add-transceiver", recv, Gst.Caps.from_string(H264_CAPS))
    s.w.emit("add-transceiver", recv, Gst.Caps.from_string(OPUS_CAPS))
    s.run(seconds)
    s.finish()
    return s.result


def main():
    mode, url, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    extra = sys.argv[4:5]
    if mode == "publish":
        result = publish(url, seconds, *extra)
    else:
        result = view(url, seconds, *extra)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
