//! RabbitMQ: publish with publisher confirms and consume the message back with its headers.

use std::time::Duration;

use futures::StreamExt;
use hub_tests::{report, require, unique, AMQP};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties};

#[tokio::test]
async fn rabbitmq_publish_with_confirms_and_consume() -> anyhow::Result<()> {
    require("rabbitmq", "127.0.0.1:5672");
    let conn = Connection::connect(AMQP, ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let queue = unique("hub-smoke");
    channel
        .queue_declare(
            &queue,
            QueueDeclareOptions {
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;

    let mut headers = FieldTable::default();
    headers.insert(
        "ce-type".into(),
        AMQPValue::LongString("loan_application.approved".into()),
    );
    let props = BasicProperties::default()
        .with_headers(headers)
        .with_delivery_mode(2);
    let confirm = channel
        .basic_publish(
            "",
            &queue,
            BasicPublishOptions::default(),
            b"{\"ok\":true}",
            props,
        )
        .await?
        .await?;
    assert!(
        matches!(confirm, Confirmation::Ack(_)),
        "broker confirms the publish: {confirm:?}"
    );

    let mut consumer = channel
        .basic_consume(
            &queue,
            "hub-smoke",
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next())
        .await?
        .expect("one delivery")?;
    assert_eq!(delivery.data, b"{\"ok\":true}");
    let got = delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("ce-type").cloned());
    assert_eq!(
        got,
        Some(AMQPValue::LongString("loan_application.approved".into()))
    );
    delivery.ack(BasicAckOptions::default()).await?;
    conn.close(200, "done").await?;
    report("rabbitmq", &format!("127.0.0.1:5672: published to {queue} with confirms (acked), consumed it with its ce-type header"));
    Ok(())
}
