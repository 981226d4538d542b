// The client's own test in Node, against a running Lethe: `node test/node.mjs '<config json>'`, config
// { base, token, manager, subject, eicar, photo, mode } (mode "flow": every operation; "verify": the webhook messages
// given in config.messages, each verified). Prints one JSON line; exits 1 on the first failure.
import { createHash, webcrypto } from 'node:crypto'
import { readFileSync } from 'node:fs'
import * as tus from 'tus-js-client'
import { Client, LetheError, OPERATIONS, UploadInterrupted, WEBHOOK_TYPES, verifyWebhook } from '../src/index.js'

if (!globalThis.crypto) globalThis.crypto = webcrypto
const config = JSON.parse(process.argv[2])
const MIB = 1024 * 1024
const sha = (bytes) => createHash('sha256').update(bytes).digest('hex')
const check = (ok, what) => { if (!ok) throw new Error(`failed: ${what}`) }

function data (size, seed) {
  const bytes = new Uint8Array(size)
  let x = seed
  for (let i = 0; i < size; i++) { x = (x * 1103515245 + 12345) >>> 0; bytes[i] = x >>> 24 }
  return bytes
}

/** The network as a client meets it: the first PUT of part `number` fails as a cut connection would. */
function cutting (number) {
  let cut = false
  return async (request) => {
    if (!cut && request.method === 'PUT' && request.url.endsWith(`/parts/${number}`)) {
      cut = true
      throw new TypeError('fetch failed: connection reset')
    }
    return fetch(request)
  }
}

async function flow () {
  const alex = new Client(config.base, config.token, { backoffMs: 50 })
  const manager = new Client(config.base, config.manager, { backoffMs: 50 })
  const big = data(12 * MIB + 321, 7)
  const person = JSON.parse(Buffer.from(config.token.split('.')[1], 'base64url')).sub

  // a native upload cut at its second part, resumed from what the server has
  let fileId
  try {
    await new Client(config.base, config.token, { retries: 0, fetch: cutting(2) }).upload(big, { name: 'big.bin' })
    throw new Error('the cut upload went through')
  } catch (error) {
    check(error instanceof UploadInterrupted, `UploadInterrupted, not ${error}`)
    fileId = error.fileId
  }
  check(JSON.stringify((await alex.getUpload(fileId)).upload.parts_received) === '[1]', 'part 1 only')
  const done = await alex.resumeUpload(fileId, big)
  check(done.id === fileId && done.sha256 === sha(big), 'the resumed upload holds the bytes')
  check((await alex.waitReady(fileId)).scan_status === 'clean', 'clean')

  // a 5 MiB range, then the first bytes held to its ETag
  const first = 3 * MIB + 17
  const ranged = await alex.download(fileId, { range: [first, first + 5 * MIB - 1] })
  const got = new Uint8Array(await ranged.arrayBuffer())
  check(ranged.status === 206 && sha(got) === sha(big.subarray(first, first + 5 * MIB)), '5 MiB range')
  // Lethe's own answer carries its validator; a redirect to the store (an unsealed S3 installation) does not
  const pinned = ranged.url.startsWith(config.base) ? ranged.headers.get('etag') : undefined
  check(pinned !== undefined || config.store === 'seaweed', 'an ETag from Lethe')
  const again = await alex.download(fileId, { range: [0, 9], etag: pinned })
  check(sha(new Uint8Array(await again.arrayBuffer())) === sha(big.subarray(0, 10)), 'range by ETag')

  // tus, a link, the listing
  const small = await alex.upload('over tus from node', { name: 'tus.txt', mimeType: 'text/plain', transfer: 'tus' })
  check((await alex.waitReady(small.id)).scan_status === 'clean', 'tus file clean')
  const link = await alex.link(small.id, { ttl: '10m' })
  check(new TextDecoder().decode(await alex.downloadLink(link.url)) === 'over tus from node', 'link')
  const listed = []
  for await (const one of alex.files({ pageSize: 1 })) listed.push(one.id)
  check(listed.includes(fileId) && listed.includes(small.id), 'listing')

  // attachments, drafts, events
  const messageId = globalThis.crypto.randomUUID()
  check((await alex.attach(messageId, [small.id])).file_ids[0] === small.id, 'attach')
  check((await alex.putDraft('reply', 'see', [fileId])).file_ids[0] === fileId, 'draft')
  check((await alex.drafts()).length === 1, 'drafts')
  await alex.deleteDraft('reply')
  let events = 0
  for await (const _ of alex.events()) events++
  check(events > 0, 'events')

  // blocked by the scan (the EICAR test string), and a photo's variants
  const infected = await alex.upload(config.eicar, { name: 'eicar.com' })
  check((await alex.waitReady(infected.id)).scan_status === 'infected', 'infected')
  const photo = await alex.upload(readFileSync(config.photo), { name: 'photo.jpg', mimeType: 'image/jpeg' })
  check((await alex.waitReady(photo.id)).scan_status === 'clean', 'photo clean')

  // an upload given up: its file fails (file.failed, aborted)
  const given = await alex.beginUpload({ name: 'later.bin', size_bytes: 10, mime_type: 'application/octet-stream' })
  await alex.abortUpload(given.file.id)

  // the rest of the operations: a variant, the avatar and logo slots, a restore, a tus termination, a part URL
  for (const deadline = Date.now() + 60000; !(await alex.file(photo.id)).thumbnails.length;) {
    check(Date.now() < deadline, 'variants')
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  check((await alex.downloadVariant(photo.id, 'thumb-small')).ok, 'variant')
  const face = await alex.upload(readFileSync(config.photo), { name: 'face.jpg', mimeType: 'image/jpeg', purpose: 'avatar' })
  await alex.waitReady(face.id)
  check((await alex.setAvatar(person, face.id)).file_id === face.id, 'setAvatar')
  check((await alex.avatar(person)).file_id === face.id, 'avatar')
  await alex.removeAvatar(person)
  const logo = await manager.upload(readFileSync(config.photo), { name: 'logo.jpg', mimeType: 'image/jpeg', purpose: 'branding' })
  await manager.waitReady(logo.id)
  check((await manager.setLogo(logo.id)).file_id === logo.id, 'setLogo')
  check((await manager.logo()).file_id === logo.id, 'logo')
  await manager.removeLogo()
  const restorable = await alex.upload('restore me', { name: 'r.txt', mimeType: 'text/plain' })
  await alex.delete(restorable.id)
  try {
    check((await manager.restore(restorable.id)).id === restorable.id, 'restore')
  } catch (error) {
    check(error instanceof LetheError && [404, 409, 410].includes(error.status), `restore refused: ${error}`)
  }
  try {
    await alex.partUrl(given.file.id, 1)
    throw new Error('a part URL of a native upload')
  } catch (error) {
    check(error instanceof LetheError && error.code, `partUrl refused: ${error}`)
  }
  const tusFile = await new Promise((resolve, reject) => {
    const upload = new tus.Upload(Buffer.alloc(100, 116), {
      endpoint: `${config.base}/api/v1/tus`,
      headers: { Authorization: `Bearer ${config.token}` },
      chunkSize: 10,
      metadata: { filename: 't.bin' },
      onError: reject,
      onChunkComplete: () => { upload.abort(); resolve(upload.url.split('/').pop()) }
    })
    upload.start()
  })
  await alex.terminateTusUpload(tusFile)
  check((await alex.file(tusFile)).upload_state === 'failed', 'terminated')

  // a problem with its code
  try {
    await alex.file(globalThis.crypto.randomUUID())
    throw new Error('an unknown file was found')
  } catch (error) {
    check(error instanceof LetheError && error.status === 404 && error.code === 'not_found', `problem ${error}`)
  }

  // manage
  const hold = await manager.placeHold('CASE-2', { fileId })
  check((await manager.hold(hold.id)).id === hold.id, 'hold')
  const holds = []
  for await (const one of manager.holds()) holds.push(one.id)
  check(holds.includes(hold.id), 'holds')
  check(Boolean((await manager.explain(fileId)).state), 'explain')
  await manager.releaseHold(hold.id)
  check((await manager.setQuota(person, { max_files: 50 })).principal_id === person, 'quota')
  check((await manager.usage(person)).files.used >= 1, 'usage')
  await alex.deleteMessage(messageId)
  const results = await alex.deleteMany([fileId, globalThis.crypto.randomUUID()])
  check(results[0].status === 204 && results[1].status === 404, 'deleteMany')
  const erasure = await manager.erase(config.subject)
  return { operations: Object.keys(OPERATIONS), webhookTypes: WEBHOOK_TYPES, fileId, erasureId: erasure.id, holdId: hold.id }
}

async function verify () {
  const types = []
  for (const message of config.messages) {
    types.push((await verifyWebhook(message.body, message.headers, config.secret)).type)
  }
  let refused = false
  try {
    await verifyWebhook(config.messages[0].body, config.messages[0].headers, 'whsec_' + Buffer.alloc(32, 1).toString('base64'))
  } catch { refused = true }
  return { types, refused }
}

try {
  const result = config.mode === 'verify' ? await verify() : await flow()
  console.log(JSON.stringify(result))
} catch (error) {
  console.log(JSON.stringify({ error: String(error && error.stack ? error.stack : error) }))
  process.exit(1)
}
