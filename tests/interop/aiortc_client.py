"""aiortc (a Python WebRTC stack no one here wrote) against tern: a WHIP publisher or a WHEP
viewer, for the interop matrix (tests/browser/interop.test.mjs runs it).

    python aiortc_client.py publish URL SECONDS MEDIA_FILE [CODEC]
        Publishes MEDIA_FILE (video and audio, played at its own pace) to the WHIP URL for
        SECONDS, offering only CODEC (H264 or VP8; default: aiortc's own offer), then DELETEs
        the session. Prints one JSON line: status, answered codec, packets sent.
    python aiortc_client.py view URL SECONDS
        Watches the WHEP URL for SECONDS and prints one JSON line: status, codec, frames
        decoded, the longest gap between decoded frames (a freeze), first-frame time, RTP
        packets received and lost (from aiortc's receiver stats).
    python aiortc_client.py watch URL SECONDS
        Watches the WHEP URL for SECONDS, printing every half second one JSON line of
        cumulative figures, as tests/interop/pion-viewer does: frames decoded, video packets
        received and lost (never reached the jitter buffer, the newest 100 excepted), the
        highest video sequence number and the ones counted lost since the line before (offsets
        from the first), audio frames, the longest gap between two audio frames since the line
        before, and what aiortc's receiver did about losses: NACK and PLI packets sent, and
        jitter-buffer overflows (a packet never filled in: aiortc then drops what it holds and
        asks for a keyframe). tests/browser/adaptive-clients.test.mjs reads them. SIGTERM
        ends it early, with the session DELETEd.
"""

import asyncio
import json
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from aiortc import (
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
)
from aiortc.contrib.media import MediaPlayer
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtcrtpreceiver import RTCRtpReceiver


# No ICE servers: aiortc's default would ask a public STUN server; tests stay on loopback.
NO_STUN = RTCConfiguration(iceServers=[])


def post_sdp(url, sdp):
    req = urllib.request.Request(
        url, data=sdp.encode(), method="POST", headers={"Content-Type": "application/sdp"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode(), r.headers.get("Location")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), None


def delete(url, location):
    if not location:
        return None
    full = urllib.parse.urljoin(url, location)
    req = urllib.request.Request(full, method="DELETE")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def answered_codec(sdp):
    for line in sdp.splitlines():
        if line.startswith("a=rtpmap:") and "/90000" in line:
            name = line.split(" ", 1)[1].split("/")[0]
            if name.lower() not in ("rtx", "red", "ulpfec"):
                return name
    return None


async def offer_answer(pc, url, role):
    """POSTs pc's offer to url and applies the answer. Returns the result dict so far
    (role, status, answered codec) and the session's Location; on a refusal the dict (with
    the error) is printed, pc closed, and the Location is None."""
    await pc.setLocalDescription(await pc.createOffer())
    status, answer, location = await asyncio.to_thread(post_sdp, url, pc.localDescription.sdp)
    out = {"role": role, "status": status}
    if status != 201:
        out["error"] = answer
        print(json.dumps(out), flush=True)
        await pc.close()
        return out, None
    out["codec"] = answered_codec(answer)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    return out, location or ""


async def publish(url, seconds, media, codec):
    pc = RTCPeerConnection(NO_STUN)
    player = MediaPlayer(media)
    video = pc.addTransceiver(player.video, direction="sendonly")
    pc.addTransceiver(player.audio, direction="sendonly")
    if codec:
        caps = RTCRtpSender.getCapabilities("video").codecs
        video.setCodecPreferences([c for c in caps if c.mimeType.lower() == f"video/{codec.lower()}"])
    out, location = await offer_answer(pc, url, "publisher")
    if location is None:
        return 1
    print(json.dumps({"role": "publisher", "event": "publishing", "codec": out["codec"]}), flush=True)
    await asyncio.sleep(seconds)
    stats = await pc.getStats()
    out["packets_sent"] = sum(
        s.packetsSent for s in stats.values() if s.type == "outbound-rtp" and s.kind == "video"
    )
    out["delete"] = await asyncio.to_thread(delete, url, location)
    await pc.close()
    print(json.dumps(out), flush=True)
    return 0


async def view(url, seconds):
    pc = RTCPeerConnection(NO_STUN)
    pc.addTransceiver("video", direction="recvonly")
    pc.addTransceiver("audio", direction="recvonly")
    got = {}
    started = time.monotonic()

    async def consume(track):
        times = []
        try:
            while True:
                await track.recv()
                times.append(time.monotonic())
        except Exception:
            pass
        finally:
            got[track.kind] = times

    tasks = []

    @pc.on("track")
    def on_track(track):
        tasks.append(asyncio.ensure_future(consume(track)))

    out, location = await offer_answer(pc, url, "viewer")
    if location is None:
        return 1
    await asyncio.sleep(seconds)
    stats = await pc.getStats()
    for s in stats.values():
        if s.type == "inbound-rtp" and s.kind == "video":
            out["packets_received"] = s.packetsReceived
            out["packets_lost"] = s.packetsLost
    out["delete"] = await asyncio.to_thread(delete, url, location)
    await pc.close()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    frames = got.get("video", [])
    out["frames_decoded"] = len(frames)
    out["audio_frames"] = len(got.get("audio", []))
    out["first_frame_ms"] = round((frames[0] - started) * 1000) if frames else None
    gaps = [b - a for a, b in zip(frames, frames[1:])]
    out["longest_gap_ms"] = round(max(gaps) * 1000) if gaps else None
    print(json.dumps(out), flush=True)
    return 0


class SeqLog:
    """Which video sequence numbers arrived (extended past the wrap, as offsets from the
    first), and which are counted lost: missing more than 100 behind the highest, as
    tests/interop/pion-viewer counts them."""

    def __init__(self):
        self.first = None
        self.highest = 0
        self.got = bytearray()
        self.counted = 0
        self.lost = 0

    def add(self, seq):
        if self.first is None:
            self.first = seq
        last = (self.first + self.highest) & 0xFFFF
        delta = (seq - last + 0x8000) % 0x10000 - 0x8000
        ext = self.highest + delta
        if ext < 0:
            return
        self.highest = max(self.highest, ext)
        if ext >= len(self.got):
            self.got.extend(bytes(ext + 1 - len(self.got)))
        self.got[ext] = 1

    def fresh_losses(self):
        fresh = []
        while self.counted < self.highest - 100:
            if not self.got[self.counted]:
                self.lost += 1
                fresh.append(self.counted)
            self.counted += 1
        return fresh


def count_receiver_actions(fig, seqs):
    """Counts, in fig, the NACK and PLI packets aiortc's receivers send and its video
    jitter buffers' overflows, and logs in seqs each video packet that reaches a jitter
    buffer (retransmissions unwrapped), by wrapping aiortc's own methods."""
    send_nack, send_pli = RTCRtpReceiver._send_rtcp_nack, RTCRtpReceiver._send_rtcp_pli
    add, smart_remove = JitterBuffer.add, JitterBuffer.smart_remove

    async def nack(self, media_ssrc, lost):
        fig["nacks"] += 1
        return await send_nack(self, media_ssrc, lost)

    async def pli(self, media_ssrc):
        fig["plis"] += 1
        return await send_pli(self, media_ssrc)

    def jitter_add(self, packet):
        if self._is_video:
            seqs.add(packet.sequence_number)
        return add(self, packet)

    def overflow(self, count):
        if self._is_video:
            fig["overflows"] += 1
        return smart_remove(self, count)

    RTCRtpReceiver._send_rtcp_nack = nack
    RTCRtpReceiver._send_rtcp_pli = pli
    JitterBuffer.add = jitter_add
    JitterBuffer.smart_remove = overflow


async def watch(url, seconds):
    fig = {"frames": 0, "audio_packets": 0, "audio_gap_ms": 0, "nacks": 0, "plis": 0, "overflows": 0}
    seqs = SeqLog()
    count_receiver_actions(fig, seqs)
    pc = RTCPeerConnection(NO_STUN)
    pc.addTransceiver("video", direction="recvonly")
    pc.addTransceiver("audio", direction="recvonly")
    last_audio = [None]

    async def consume(track):
        try:
            while True:
                await track.recv()
                if track.kind == "video":
                    fig["frames"] += 1
                else:
                    now = time.monotonic()
                    if last_audio[0] is not None:
                        gap = round((now - last_audio[0]) * 1000)
                        fig["audio_gap_ms"] = max(fig["audio_gap_ms"], gap)
                    last_audio[0] = now
                    fig["audio_packets"] += 1
        except Exception:
            pass

    tasks = []

    @pc.on("track")
    def on_track(track):
        tasks.append(asyncio.ensure_future(consume(track)))

    out, location = await offer_answer(pc, url, "viewer")
    if location is None:
        return 1
    # SIGTERM ends the watch early, and the session with a DELETE: a viewer that just
    # vanished would keep its session (and its share of a narrow link the next test's
    # viewer uses) until tern's consent timeout.
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    started = time.monotonic()
    while time.monotonic() - started < seconds and not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
            break
        except asyncio.TimeoutError:
            pass
        line = dict(fig, ms=round((time.monotonic() - started) * 1000), location=location)
        line.update(video_packets=0, lost_seqs=seqs.fresh_losses(), lost=seqs.lost, highest=seqs.highest)
        for s in (await pc.getStats()).values():
            if s.type == "inbound-rtp" and s.kind == "video":
                line.update(video_packets=s.packetsReceived)
        print(json.dumps(line), flush=True)
        fig["audio_gap_ms"] = 0
    await asyncio.to_thread(delete, url, location)
    await pc.close()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return 0


def main():
    mode, url, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    if mode == "publish":
        codec = sys.argv[5] if len(sys.argv) > 5 else None
        return asyncio.run(publish(url, seconds, sys.argv[4], codec))
    if mode == "view":
        return asyncio.run(view(url, seconds))
    if mode == "watch":
        return asyncio.run(watch(url, seconds))
    print(f"unknown mode {mode}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
